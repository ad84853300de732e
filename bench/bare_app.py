"""The baseline for the HTTP benchmarks: bare FastAPI endpoints returning a constant, at the same
paths as the endpoints they are compared with, so that each gets the very same request bytes (the
body is received and left unread)."""

from fastapi import FastAPI

app = FastAPI()


@app.post("/v1/grade")
async def grade() -> dict[str, float]:
    return {"reward": 1.0}


@app.post("/get_reward")
async def get_reward() -> dict[str, float]:
    return {"reward": 1.0}
