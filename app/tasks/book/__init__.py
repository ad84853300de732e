"""The book split: worked questions parsed at load time from the pinned, verified book source."""
