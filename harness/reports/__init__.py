"""Pages of a run directory: `tables` (the measured tables as text cells), `charts` (SVG), `html`
(report.html) and `markdown` (the tables for a docs page), each reading the verified run."""
