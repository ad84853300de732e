"""The exam split: authored questions over every chapter of the book. Numeric questions carry an
executable oracle (the expected answer is whatever it returns); conceptual questions carry a
reference answer, a locator into the pinned book source and a validation rationale."""
