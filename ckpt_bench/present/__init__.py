"""What a person reads: the rows and labels every view shares (`rows`), the terminal summary
(`summary`), report.html and its plots (`html`), and reports side by side (`compare`).
"""
