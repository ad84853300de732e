"""The baseline for the HTTP benchmark: a bare FastAPI endpoint returning a constant."""

from fastapi import FastAPI

app = FastAPI()


@app.post("/v1/grade")
async def grade() -> dict[str, float]:
    return {"reward": 1.0}
