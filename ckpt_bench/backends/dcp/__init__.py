"""The PyTorch DCP backend, worker side: named model shapes (`models`) and the rank entry (`worker`)."""
