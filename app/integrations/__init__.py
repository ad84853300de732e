"""Adapters for the trainers and evaluators people already run: OpenRLHF, verl, TRL, verifiers."""
