"""Training of the embedded default: the project's BPE tokenizer and tiny target DLMs."""
