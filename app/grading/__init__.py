"""The grading core: request and result models, trainer labels, inline references and the
GradingService. Every entry point (HTTP, trainer adapters, eval, worker) imports it, never the reverse."""
