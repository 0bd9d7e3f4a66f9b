"""Bug reports: a finding as a report a kernel team acts on (script.py: the standalone
script; report.py: the Markdown; __main__.py: the command line)."""
