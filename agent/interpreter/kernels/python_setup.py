# Runs in every Python kernel before its first cell (python_bridge.py).
# Plain tracebacks: agents read them, and colour codes are noise there.
get_ipython().run_line_magic("colors", "nocolor")
