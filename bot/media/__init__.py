"""Pictures and files taken in: the caps checked first, the download, and the copies kept by hash.

The stored record of one (`bot.core.media`) is a plain value; this package does the I/O around it.
"""
