"""Results over time: the results store (store.py, schema.py, rows.py) and the questions a
nightly asks of it (runs.py, cases.py, trends.py), printed by render.py and __main__.py."""
