"""Task banks (splits). Each bank serves public task views and keeps the gold hidden."""
