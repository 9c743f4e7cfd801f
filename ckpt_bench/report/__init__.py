"""From checkpoint events to numbers: the one engine (`engine`), report assembly for runs and logs
(`assembly`), checkpoint-interval advice (`advice`), and the log parsers that turn other tools' logs into
events (`parsers`).
"""
