"""Model evaluation: sample completions from an OpenAI-compatible endpoint, grade, report."""
