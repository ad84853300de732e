"""What the OpenAPI document says beyond what the models declare: the limits the service enforces
from its settings, and the refusals every route can answer with."""

from __future__ import annotations

from typing import Any


def document_limits(schema: dict[str, Any], limits: Any) -> None:
    """Put the limits the service enforces from its settings into its OpenAPI document: list
    lengths of the batch bodies, the completion size, the page size of GET /v1/tasks."""
    components = schema.get("components", {}).get("schemas", {})
    lists = {"GradeBatchRequest": ("items",), "LabelledRequest": ("items",),
             "GetRewardRequest": ("query", "prompts", "labels")}
    for name, fields in lists.items():
        for field in fields:
            prop = components.get(name, {}).get("properties", {}).get(field)
            for branch in [prop, *(prop or {}).get("anyOf", [])] if prop else []:
                if branch.get("type") == "array":
                    branch["maxItems"] = limits.max_grades_per_batch
    text = limits.max_completion_chars
    for name in ("GradeRequest", "LabelledItem"):
        completion = components.get(name, {}).get("properties", {}).get("completion", {})
        for branch in completion.get("anyOf", []):
            if branch.get("type") == "string":
                branch["maxLength"] = text
    content = components.get("ChatMessage", {}).get("properties", {}).get("content", {})
    for branch in content.get("anyOf", []):
        if branch.get("type") == "string":
            branch["maxLength"] = text
        elif branch.get("type") == "array":  # the parts are joined: bound their number and size
            branch["maxItems"] = 16
            branch["items"] = {"type": "object", "properties": {"type": {"type": "string", "maxLength": 32},
                                                                 "text": {"type": "string", "maxLength": text // 16}}}
    for path in ("/v1/tasks", "/tasks"):
        for parameter in schema.get("paths", {}).get(path, {}).get("get", {}).get("parameters", []):
            if parameter.get("name") == "n":
                parameter.setdefault("schema", {})["maximum"] = limits.max_tasks_per_request


def document_refusals(schema: dict[str, Any]) -> None:
    """Every operation documents its refusals (the {error, detail} body, any 4xx: an unknown id
    is a 404 on most routes), and /metrics its real content type."""
    body = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}}
    for path, operations in schema.get("paths", {}).items():
        for operation in operations.values():
            responses = operation.setdefault("responses", {})
            if path not in ("/healthz", "/readyz", "/metrics") and not any(s.startswith("4") for s in responses
                                                                           if s != "422"):
                responses["4XX"] = {"description": "refused: {error, detail}", **body}
    readyz = schema.get("paths", {}).get("/readyz", {}).get("get")
    if readyz is not None:
        readyz["responses"].setdefault("503", {"description": "not ready: {ready: false, checks} names the failing "
                                                              "checks"})
    metrics = schema.get("paths", {}).get("/metrics", {}).get("get")
    if metrics is not None:
        metrics["responses"]["200"] = {"description": "Prometheus text exposition format",
                                       "content": {"text/plain": {"schema": {"type": "string"}}}}
