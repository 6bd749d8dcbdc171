"""The bottom of the house: values every part shares and nothing below them.

Session keys and the normalised message shapes, the error tree, chunking, pictures and files as
stored records, misconfigurations as values, logging. Nothing here imports another package of ours.
"""
