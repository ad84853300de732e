"""Judge grading: an OpenAI-compatible chat model decides whether a response agrees with the
stored reference. The model is chosen per request (GradeOptions.judge) or defaults from settings;
the base URL must be on the operator's allow-list, so a tenant cannot aim the service at internal
addresses; the API key comes from the environment variable settings name, never from a request.
A judge that cannot be reached (down, time-outs, 5xx, refused key) yields ``judge_error``: unscored,
never a reward. A reply that is not a verdict is asked for once more, in the constrained form;
if it is still not one the item is scored 0 (``no_verdict``), since the response may have
provoked it. A request the endpoint refuses as malformed (400, 413, 422: a context overflow from
a padded response, say) is tried once more with the response left out: if that one is answered,
the response caused the refusal and the item is scored 0; if not, the endpoint is at fault and
the item is unscored. How the verdict is asked for and read is in judge_prompt.py."""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from app.graders.judge_prompt import (
    YES_NO,
    VerdictWords,
    build_messages,
    candidate_text,
    escape_response,
    fence_tag,
    parse_json_verdict,
    parse_logprob_verdict,
    parse_verdict,
    retry_messages,
    verdict_schema,
    verdict_words,
)
from app.graders.result import GradeResult, Outcome

if TYPE_CHECKING:
    import openai

    from app.graders.options import GradeOptions
    from app.settings import JudgeSettings, Settings
    from app.tasks.base import Task

log = logging.getLogger(__name__)

# Sent with every judge request: thinking models must answer directly within the token budget.
EXTRA_BODY = {"chat_template_kwargs": {"enable_thinking": False}}
KEYLESS_PLACEHOLDER = "EMPTY"  # what keyless local servers (vLLM, SGLang) expect


class JudgeUnavailable(Exception):
    """No usable judge for this request: the message is safe to show the client."""


class JudgeCallFailed(Exception):
    def __init__(self, reason: str, attempts: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.attempts = attempts


class JudgeRefused(JudgeCallFailed):
    """The endpoint refused the request as malformed (400, 413, 422): the request's content, which
    may be the response's doing, not the endpoint being down."""


# Statuses that say "this request" rather than "this endpoint" (401/403/404 are configuration).
REQUEST_REFUSALS = frozenset({400, 413, 422})
# What the judge is shown in place of a response when checking who caused a refusal.
PROBE_RESPONSE = "(no response)"


@dataclass(frozen=True)
class JudgeTarget:
    model: str
    base_url: str
    api_key: str

    def __repr__(self) -> str:  # never show the key, even in a debugger or a log line
        return f"JudgeTarget(model={self.model!r}, base_url={self.base_url!r})"


def normalise_base_url(url: str) -> str:
    """Canonical form for allow-list comparison: lower-case scheme and host, no trailing slash.
    Credentials, queries and fragments are refused outright."""
    url = url.strip()
    if any(c < " " or c == "\x7f" for c in url):  # which the HTTP stack refuses (urlsplit drops some)
        raise JudgeUnavailable("judge base_url must not hold control characters")
    try:  # urlsplit refuses an unclosed "[", .port one outside 0-65535 or not a number
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise JudgeUnavailable("judge base_url is not a valid URL (host or port)") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise JudgeUnavailable("judge base_url must be an http(s) URL")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise JudgeUnavailable("judge base_url must not carry credentials, a query or a fragment")
    host = parts.hostname.lower()
    if ":" in host:  # an IPv6 address: its brackets back (hostname drops them)
        host = f"[{host}]"
    netloc = host + (f":{port}" if port else "")
    return urlunsplit((parts.scheme.lower(), netloc, parts.path.rstrip("/"), "", ""))


def _allowed(judge: JudgeSettings) -> frozenset[str]:
    return _normalised_allow_list(tuple(judge.allowed_base_urls))


@functools.lru_cache(maxsize=16)
def _normalised_allow_list(urls: tuple[str, ...]) -> frozenset[str]:
    """Read once per allow-list (every judge request asks): a malformed entry is logged once, not
    with each request."""
    out = set()
    for url in urls:
        try:
            out.add(normalise_base_url(url))
        except JudgeUnavailable:
            log.warning("ignoring malformed entry in the judge allow-list")
    return frozenset(out)


def resolve_judge(options: GradeOptions, settings: Settings) -> JudgeTarget:
    """The model, allow-listed base URL and key for this request, or JudgeUnavailable."""
    judge = settings.judge
    spec = options.judge
    model = spec.model if spec is not None else judge.default_model
    if not model:
        raise JudgeUnavailable("no judge model: name one in the request's judge.model, "
                               "or set SCALING_GRADER_JUDGE__DEFAULT_MODEL")
    requested = spec.base_url if spec is not None and spec.base_url else judge.default_base_url
    if not requested:
        raise JudgeUnavailable("no judge base_url: name one in the request's judge.base_url, "
                               "or set SCALING_GRADER_JUDGE__DEFAULT_BASE_URL")
    base_url = normalise_base_url(requested)
    if base_url not in _allowed(judge):
        raise JudgeUnavailable("judge base_url is not on the operator's allow-list")
    return JudgeTarget(model=model, base_url=base_url, api_key=_api_key(judge))


def _api_key(judge: JudgeSettings) -> str:
    if not judge.api_key_env:
        return KEYLESS_PLACEHOLDER
    api_key = os.environ.get(judge.api_key_env, "")
    if not api_key:
        raise JudgeUnavailable("the judge API key is not configured on this server")
    return api_key


def judge_problem(options: GradeOptions, settings: Settings) -> str | None:
    """Why no judge can serve this request, or None if one can."""
    try:
        resolve_judge(options, settings)
    except JudgeUnavailable as exc:
        return str(exc)
    return None


def require_judge_for(tasks: Iterable[Task], options: GradeOptions, settings: Settings) -> None:
    """Refuse up front (JudgeUnavailable) a request holding judge items when no judge is usable,
    instead of returning a judge_error per item after the fact."""
    if any(t.grading == "judge" for t in tasks):
        problem = judge_problem(options, settings)
        if problem is not None:
            raise JudgeUnavailable(f"this request contains judge-graded items but {problem}")


# ---- transport ------------------------------------------------------------------------------
# openai is imported by the functions that call a judge, not with this module: it takes a second
# or more to import, and every process (the API, each worker, every CLI command) imports this
# module, most of them never calling a judge.

_clients: dict[tuple[str, str, float], openai.OpenAI] = {}
_clients_lock = threading.Lock()


def _client(target: JudgeTarget, timeout: float) -> openai.OpenAI:
    """One client per endpoint, key and timeout, reused so connections are pooled."""
    import openai  # heavy, needed only when a judge is called (see above)

    key = (target.base_url, hashlib.sha256(target.api_key.encode()).hexdigest(), timeout)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            # Retries are ours (bounded, logged without secrets), so the client's are off; redirects
            # are not followed, so an allowed endpoint cannot bounce a request to another address.
            client = openai.OpenAI(
                base_url=target.base_url, api_key=target.api_key, timeout=timeout, max_retries=0,
                http_client=openai.DefaultHttpxClient(follow_redirects=False, timeout=timeout),
            )
            _clients[key] = client
        return client


def warm_clients(judge: JudgeSettings) -> int:
    """Import openai and make the client of every allow-listed endpoint now, so that a process
    that will call judges (a worker lane on the judge queue) holds from its start what its first
    judge call would otherwise load (about 1.3 s and 20 MiB: openai, httpx, an SSL context): its
    first job is not slower than the rest, and its memory does not step up hours into a run.
    Endpoints are the allow-list's and the key and timeout the operator's, so these are the
    only clients the process can ever make. Returns how many were made."""
    import openai  # heavy, needed only when a judge is called (see above)

    del openai  # (imported for its cost here; the clients below import it again, at no cost)
    try:
        api_key = _api_key(judge)
    except JudgeUnavailable:
        return 0  # every judge call is refused (resolve_judge): no client to make
    made = 0
    for url in sorted(_allowed(judge)):
        try:
            client = _client(JudgeTarget(model="", base_url=url, api_key=api_key), judge.timeout_seconds)
            client.chat.completions  # noqa: B018 - built on first use (with the modules it needs)
        except Exception as exc:  # an entry the HTTP stack refuses costs its own calls, not the lane's start
            log.warning("no judge client for allow-listed endpoint %s (%s)", url, type(exc).__name__)
            continue
        made += 1
    "judge".encode("idna")  # the codec a request's host name is encoded with, loaded on first use
    return made


def _retry_after(exc: Exception) -> float | None:
    response = getattr(exc, "response", None)
    if response is None:
        return None
    try:
        return float(response.headers.get("retry-after", ""))
    except ValueError:
        return None


def _describe(exc: Exception) -> str:
    import openai  # heavy, needed only when a judge is called (see above)

    status = getattr(exc, "status_code", None)
    if isinstance(exc, openai.APITimeoutError):
        return "the judge timed out"
    if isinstance(exc, openai.RateLimitError):
        return "the judge kept rate-limiting (429)"
    if isinstance(exc, openai.APIConnectionError):
        return "the judge endpoint could not be reached"
    if status is not None:
        return f"the judge endpoint answered HTTP {status}"
    return f"the judge call failed ({type(exc).__name__})"


@dataclass(frozen=True)
class JudgeReply:
    text: str | None  # the reply as sent (kept out of responses unless the gold is revealed)
    verdict: bool | None  # None: the reply is not a verdict
    attempts: int


CONSTRAINTS = ("none", "guided_choice", "json_schema", "logprobs")


def constraint_params(mode: str, max_tokens: int, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    """Request parameters that constrain the judge's answer in ``mode``. ``schema`` is the verdict
    schema of the grade's words (judge-check probes with choices no free reply would contain)."""
    schema = schema or verdict_schema(YES_NO)
    extra: dict[str, Any] = dict(EXTRA_BODY)
    params: dict[str, Any] = {"max_tokens": max_tokens}
    if mode == "guided_choice":  # vLLM (and SGLang's OpenAI server): decoding limited to the choices
        extra["guided_choice"] = list(schema["schema"]["properties"]["verdict"]["enum"])
    elif mode == "json_schema":
        params["response_format"] = {"type": "json_schema", "json_schema": schema}
    elif mode == "logprobs":  # one token: the likelier of yes and no is the verdict
        params.update(max_tokens=1, logprobs=True, top_logprobs=10)
    return {**params, "extra_body": extra}


def _read(completion: Any, mode: str, words: VerdictWords) -> tuple[str | None, bool | None]:
    choices = completion.choices or []
    message = choices[0].message if choices else None
    text = message.content if message is not None else None
    if mode == "json_schema":
        return text, parse_json_verdict(text, words)
    if mode == "logprobs":
        content = getattr(getattr(choices[0], "logprobs", None), "content", None) if choices else None
        if content:
            top = [(t.token, t.logprob) for t in (content[0].top_logprobs or [])]
            top.append((content[0].token, content[0].logprob))
            return text, parse_logprob_verdict(top, words)
        return text, None  # no log-probabilities: the endpoint ignored the mode it was set to
    if mode == "guided_choice":  # the decoder could emit nothing else: the reply is the word itself
        word = (text or "").strip().lower()
        return text, True if word == words.yes else False if word == words.no else None
    return text, parse_verdict(text, words)


def call_judge(
    target: JudgeTarget, messages: list[dict[str, str]], judge: JudgeSettings, mode: str | None = None,
    schema: dict[str, Any] | None = None, words: VerdictWords = YES_NO,
) -> JudgeReply:
    """The judge's reply, read in ``mode`` (default: the configured constraint); JudgeCallFailed
    when retries run out or the endpoint refuses the request."""
    import openai  # heavy, needed only when a judge is called (see above)

    retryable = (openai.RateLimitError, openai.APITimeoutError, openai.APIConnectionError,
                 openai.InternalServerError)
    mode = mode or judge.constraint
    client = _client(target, judge.timeout_seconds)
    attempts = 0
    delay = judge.backoff_seconds
    while True:
        attempts += 1
        try:
            completion = client.chat.completions.create(
                model=target.model,
                messages=messages,  # type: ignore[arg-type]
                temperature=0.0,
                **constraint_params(mode, judge.max_tokens, schema or verdict_schema(words)),
            )
        except retryable as exc:
            log.warning("judge %s at %s: %s (attempt %d)", target.model, target.base_url,
                        type(exc).__name__, attempts)
            if attempts > judge.max_retries:
                raise JudgeCallFailed(_describe(exc), attempts) from None
            wait = _retry_after(exc)
            wait = delay if wait is None else wait
            time.sleep(min(max(wait, 0.0), judge.max_backoff_seconds))
            delay = min(delay * 2, judge.max_backoff_seconds)
            continue
        except openai.OpenAIError as exc:  # 4xx other than 429, malformed responses: not retried
            log.warning("judge %s at %s: %s", target.model, target.base_url, type(exc).__name__)
            if getattr(exc, "status_code", None) in REQUEST_REFUSALS:
                raise JudgeRefused(_describe(exc), attempts) from None
            raise JudgeCallFailed(_describe(exc), attempts) from None
        text, verdict = _read(completion, mode, words)
        return JudgeReply(text, verdict, attempts)


def ask_judge(target: JudgeTarget, messages: list[dict[str, str]], judge: JudgeSettings,
              words: VerdictWords = YES_NO) -> JudgeReply:
    """A verdict, asked once more (with a closing instruction, in the constrained form) when the
    first reply is not one. The endpoint's faults raise JudgeCallFailed (JudgeRefused for a 4xx
    that names the request)."""
    first = call_judge(target, messages, judge, words=words)
    if first.verdict is not None:
        return first
    second = call_judge(target, retry_messages(messages, words), judge, words=words)
    return JudgeReply(second.text, second.verdict, first.attempts + second.attempts)


def refusal_caused_by_response(target: JudgeTarget, question: str, reference: str, context: str | None,
                               judge: JudgeSettings) -> bool:
    """Whether the endpoint answers the same request with the response left out: if so, the
    response made the request it refused (too long for its context, say)."""
    probe = build_messages(question, reference, PROBE_RESPONSE, context,
                           words=verdict_words(PROBE_RESPONSE) or YES_NO)
    try:
        call_judge(target, probe, judge.model_copy(update={"max_retries": 0}))
    except JudgeCallFailed:
        return False
    return True


# ---- grading --------------------------------------------------------------------------------


def _ask(target: JudgeTarget, question: str, reference: str, response: str, context: str | None,
         words: VerdictWords, tag: str, judge: JudgeSettings, details: dict[str, Any], start: float,
         attempts_before: int = 0) -> JudgeReply | GradeResult:
    """The judge's reply to one ask with these verdict words, in the fence of this tag, or the
    unscored (or zero) result when the endpoint fails or refuses it."""
    messages = build_messages(question, reference, response, context, tag=tag, words=words)
    try:
        return ask_judge(target, messages, judge, words)
    except JudgeRefused as exc:
        details.update(attempts=attempts_before + exc.attempts, latency_s=round(time.perf_counter() - start, 3))
        if refusal_caused_by_response(target, question, reference, context, judge):
            return GradeResult(grading="judge", outcome=Outcome.no_verdict, reward=0.0,
                               explanation=f"{exc.reason} for the request holding this response, and answers "
                               "it without the response: scored 0", extracted_answer=response[:500],
                               details={**details, "refused_by_judge": True})
        return GradeResult(grading="judge", outcome=Outcome.judge_error, reward=0.0,
                           explanation=f"{exc.reason}; the item was not scored",
                           extracted_answer=response[:500], details=details)
    except JudgeCallFailed as exc:
        details.update(attempts=attempts_before + exc.attempts, latency_s=round(time.perf_counter() - start, 3))
        return GradeResult(grading="judge", outcome=Outcome.judge_error, reward=0.0,
                           explanation=f"{exc.reason}; the item was not scored",
                           extracted_answer=response[:500], details=details)


def grade_task(task: Task, completion: str, options: GradeOptions, settings: Settings) -> GradeResult:
    judge = settings.judge
    try:
        target = resolve_judge(options, settings)
    except JudgeUnavailable as exc:
        return GradeResult(grading="judge", outcome=Outcome.invalid_request, reward=0.0,
                           explanation=str(exc))
    if not isinstance(task.gold, str) or not task.gold.strip():
        return GradeResult(grading="judge", outcome=Outcome.error, reward=0.0,
                           explanation="the task has no reference answer to judge against")
    # The model name only: the endpoint is the operator's business (it is in the log).
    details: dict[str, Any] = {"judge_model": target.model}
    response = candidate_text(completion, judge.max_response_chars)
    if not response:
        return GradeResult(grading="judge", outcome=Outcome.no_answer, reward=0.0,
                           explanation="the completion holds no answer to judge", details=details)
    question = str(task.hidden.get("question") or task.prompt)
    raw_context = task.hidden.get("context")
    context = raw_context if isinstance(raw_context, str) else None
    words = verdict_words(escape_response(response))
    if words is None:  # the response holds most verdict words: it would choose the pair drawn
        return GradeResult(grading="judge", outcome=Outcome.no_verdict, reward=0.0,
                           explanation="the response holds most of the judge's verdict words, so no verdict could "
                           "be told from a copy of it; scored 0", extracted_answer=response[:500], details=details)
    details["constraint"] = judge.constraint
    start = time.perf_counter()
    tag = fence_tag()  # one fence for both asks: nothing but the words' meanings differs between them
    asked = _ask(target, question, task.gold, response, context, words, tag, judge, details, start)
    if isinstance(asked, GradeResult):
        return asked
    reply = asked
    verdict = reply.verdict
    attempts = reply.attempts
    confirmed: bool | None = None
    if verdict and judge.confirm_correct:
        # The same words, each named where it stood, with their meanings swapped, in the same fence
        # (VerdictWords.swapped): a judge that picks a word by anything but what the instruction
        # says it means (its place, its spelling, a coin the prompt flips) picks the same word in
        # both asks, and it means incorrect in one of them.
        asked = _ask(target, question, task.gold, response, context, words.swapped(), tag, judge, details, start,
                     attempts_before=attempts)
        if isinstance(asked, GradeResult):
            return asked
        reply, attempts = asked, attempts + asked.attempts
        confirmed = asked.verdict is True
        verdict = asked.verdict
    # The raw reply may quote the reference: it is evidence for operators only (see without_gold).
    details.update(verdict=None if verdict is None else ("yes" if verdict else "no"),
                   judge_reply=(reply.text or "")[:200], attempts=attempts,
                   latency_s=round(time.perf_counter() - start, 3))
    if confirmed is not None:
        details["confirmed"] = confirmed
    if verdict is None:
        return GradeResult(grading="judge", outcome=Outcome.no_verdict, reward=0.0,
                           explanation="the judge gave no yes/no verdict, even when asked again; scored 0, "
                           "since a response can provoke such replies",
                           extracted_answer=response[:500], details=details)
    if confirmed is False:
        return GradeResult(grading="judge", outcome=Outcome.incorrect, reward=0.0,
                           explanation="the judge found the response agrees with the reference when first asked, "
                           "but not when asked again with its verdict words' meanings swapped; scored 0",
                           extracted_answer=response[:500], details=details)
    return GradeResult(
        grading="judge",
        outcome=Outcome.correct if verdict else Outcome.incorrect,
        reward=1.0 if verdict else 0.0,
        explanation="the judge found the response agrees with the reference" if verdict
        else "the judge found the response does not agree with the reference",
        extracted_answer=response[:500],
        details=details,
    )
