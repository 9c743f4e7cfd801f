"""From checkpoint events to numbers: the one engine (`engine`), report assembly for runs and logs
(`assembly`), checkpoint-interval advice (`advice`), and the log parsers that turn other tools' logs into
events (`parsers`).
"""

#: The version of report.json's layout, written in every report (`report.schema` types it). Here, not in the
#: schema's module: writing a report of logs needs the number, not the ~70 types (a fifth of its start-up).
SCHEMA_VERSION = 1
