"""Everyday messages that share no content word with the recall tests' facts and questions: the
filler a session is padded with so that a fact must be found, not merely be among the few."""

from __future__ import annotations

CHATTER = (
    "the train was late again this morning", "made lasagne for dinner", "the heating is broken",
    "watched a documentary about volcanoes", "my knee hurts after the run", "bought new curtains",
    "the printer jammed twice", "we planted tomatoes on the balcony", "lost my umbrella on the bus",
    "tried a new coffee place downtown", "finished the quarterly report", "the cat knocked over a vase",
)
