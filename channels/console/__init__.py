"""The console: a local terminal (or any pair of streams) as one more channel.
"""
