"""A local OpenAI-compatible chat-completions server for the judge tests (a test double).

No LLM can run here, so this server answers ragpulse's judge prompts
deterministically from the fenced data block, with simple word-overlap
rules, and can be told to misbehave: delay, answer 429/500 (with
Retry-After), return invalid JSON, ignore the schema, or refuse
``json_schema`` response formats. The real ``openai`` client talks to it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import re
import threading
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from ragpulse.evaluators.text.analyses import content_token_set

_FENCE = re.compile(r"<<<DATA (\w+)>>>\n(.*?)\n<<<END \1>>>", re.S)
_PROMPT = re.compile(r"\[prompt ([\w.]+)@(\w+)\]")


@dataclass
class Behaviour:
    """What the next requests should suffer; ``times`` counts down per request."""

    delay_s: float = 0.0
    hang: bool = False  # never answer (until the server closes)
    status: int | None = None  # e.g. 429 or 500
    retry_after: str | None = None
    invalid_json: int = 0  # next N answers are not JSON
    ignore_schema: int = 0  # next N answers are JSON of the wrong shape
    reject_json_schema: bool = False
    times: int = 0  # how many requests get ``status``
    # Faithfulness verdicts: one per claim (against the first document that supports
    # it, else the first), not one per claim x document, as some judges answer.
    one_verdict_per_claim: bool = False


@dataclass
class Seen:
    requests: list[dict[str, Any]] = field(default_factory=list)
    #: When each request arrived (the server loop's monotonic clock, seconds).
    arrived: list[float] = field(default_factory=list)
    #: The status each request was answered with (absent while one is unanswered).
    statuses: list[int] = field(default_factory=list)

    def prompts(self) -> list[str]:
        out = []
        for body in self.requests:
            m = _PROMPT.search(body["messages"][0]["content"])
            out.append(m.group(1) if m else "?")
        return out


def _data(messages: list[dict[str, str]]) -> dict[str, Any]:
    """The last user message's data: its blocks (shared part, per-record part) merged."""
    for message in reversed(messages):
        if message["role"] == "user" and _FENCE.search(message["content"]):
            data: dict[str, Any] = {}
            for m in _FENCE.finditer(message["content"]):
                data.update(json.loads(m.group(2)))  # json.loads undoes the \u003c escapes
            return data
    return {}


def _supported(claim: str, documents: list[dict[str, Any]]) -> tuple[str, int | None]:
    words = content_token_set(claim)
    for doc in documents:
        vocab = content_token_set(doc["text"])
        if words and words <= vocab:
            return "supported", doc["index"]
    if "not" in claim.lower().split():
        return "contradicted", None
    return "not_found", None


def answer(prompt: str, data: dict[str, Any], per_claim: bool = False) -> dict[str, Any]:
    """The deterministic judge: enough signal for tests to tell good from bad."""
    if prompt == "faithfulness.claims":
        parts = re.split(r"(?<=[.!?])\s+", data["answer"].strip())
        return {
            "claims": [p for p in parts if p and not p.lower().startswith(("i don't", "sorry"))]
        }
    if prompt == "faithfulness.verdicts" and per_claim:
        out = []
        for claim in data["claims"]:
            verdict, index = _supported(claim["text"], data["documents"])
            out.append({"claim_index": claim["index"], "verdict": verdict, "reason": "one",
                        "document_index": data["documents"][0]["index"] if index is None
                        else index})  # fmt: skip
        return {"verdicts": out}
    if prompt == "faithfulness.verdicts":
        out = []
        for claim in data["claims"]:
            for doc in data["documents"]:
                verdict, _ = _supported(claim["text"], [doc])
                reason = f"claim {claim['index']} against document {doc['index']}"
                out.append(
                    {"claim_index": claim["index"], "document_index": doc["index"],
                     "verdict": verdict, "reason": reason}
                )  # fmt: skip
        return {"verdicts": out}
    if prompt == "faithfulness.whole":
        claims = re.split(r"(?<=[.!?])\s+", data["answer"].strip())
        ok = all(_supported(c, data["documents"])[0] == "supported" for c in claims)
        return {"verdict": int(ok), "reasoning": "all claims found" if ok else "a claim is missing"}
    if prompt == "context_relevance.verdicts":
        q = content_token_set(data["question"])
        verdicts = [
            {"document_index": d["index"], "reason": "word overlap",
             "relevant": bool(q & content_token_set(d["text"]))}
            for d in data["documents"]
        ]  # fmt: skip
        return {"verdicts": verdicts}
    if prompt == "answer_relevance.verdict":
        shared = content_token_set(data["question"]) & content_token_set(data["answer"])
        return {"verdict": "yes" if shared else "no", "reason": "word overlap"}
    if prompt == "injection.verdicts":

        def hostile(text: str) -> bool:
            return "ignore" in text.lower() and "instruction" in text.lower()

        places = data["documents"] + ([data["question"]] if data.get("question") else [])
        verdicts = [
            {"where": loc["where"], "reason": "pattern", "injection": hostile(loc["text"])}
            for loc in places
        ]
        return {"verdicts": verdicts}
    if prompt.startswith(("answer_correctness.", "answer_compliance.", "answer_completeness.")):
        return _reference_choice(prompt, data)
    if prompt in _CONVERSATION:
        turns = {t["turn"]: t for t in data["turns"]}
        verdicts = []
        for n in data["judge_turns"]:
            earlier = [turns[k] for k in sorted(turns) if k < n]
            verdicts.append({"turn": n, "reason": "word rules",
                             **_CONVERSATION[prompt](turns[n], earlier)})  # fmt: skip
        return {"verdicts": verdicts}
    if prompt == "consistency.verdicts":
        now = _numbers_by_word(data["answer"])
        verdicts = []
        for earlier in data["earlier_answers"]:
            before = _numbers_by_word(earlier["text"])
            clash = any(w in now and now[w] != v for w, v in before.items())
            verdicts.append({"index": earlier["index"], "reason": "numbers after the same word",
                             "verdict": "contradicts" if clash else "consistent"})  # fmt: skip
        return {"verdicts": verdicts}
    return {}


# The conversation judges' verdicts, one turn at a time, from word rules on the transcript.
_PLEASANTRY = re.compile(r"^(thanks|thank you|ok|okay|bye|great|cool|hi|hello)\b", re.I)
_UNMET = ("don't know", "do not know", "cannot", "can't", "sorry", "no information")
_FRUSTRATED = ("again", "already", "not what i asked", "wrong", "useless", "i said", "!!")


def _jaccard(a: str, b: str) -> float:
    x, y = content_token_set(a), content_token_set(b)
    return len(x & y) / len(x | y) if x and y else 0.0


def _completeness(turn: dict[str, Any], earlier: list[dict[str, Any]]) -> dict[str, Any]:
    user, answer = turn["user"], turn["assistant"].lower()
    same = next((t["turn"] for t in reversed(earlier) if _jaccard(user, t["user"]) >= 0.5), None)
    if _PLEASANTRY.match(user.strip()) and "?" not in user:
        return {"verdict": "no_request", "same_request_as": None}
    # Met: no evasion, and the answer shares a word with the request or names something
    # (a capitalised word past the first, a number), as short factual answers do.
    names = re.findall(r"(?<=\s)[A-Z0-9][\w']*", turn["assistant"])
    met = not any(m in answer for m in _UNMET) and bool(
        content_token_set(user) & content_token_set(answer) or names
    )
    return {"verdict": "met" if met else "unmet", "same_request_as": same}


def _facts(text: str) -> set[str]:
    words = re.findall(r"[\w']+", text)
    return {w for i, w in enumerate(words) if w[0].isdigit() or (i and w[0].isupper() and w != "I")}


def _retention(turn: dict[str, Any], earlier: list[dict[str, Any]]) -> dict[str, Any]:
    facts = set().union(*(_facts(t["user"]) for t in earlier)) if earlier else set()
    answer = turn["assistant"]
    if not facts:
        return {"verdict": "not_applicable"}
    if "?" in answer and re.search(r"\byour?\b", answer, re.I):
        return {"verdict": "forgot"}  # asks again for what the user said
    if facts & set(re.findall(r"[\w']+", answer)):
        return {"verdict": "retained"}
    return {"verdict": "not_applicable"}


def _frustration(turn: dict[str, Any], earlier: list[dict[str, Any]]) -> dict[str, Any]:
    user = turn["user"]
    repeated = any(_jaccard(user, t["user"]) >= 0.6 for t in earlier)
    marked = any(m in user.lower() for m in _FRUSTRATED)
    return {"verdict": "frustrated" if repeated or marked else "not_frustrated"}


_CONVERSATION = {
    "conversation_completeness.verdicts": _completeness,
    "knowledge_retention.verdicts": _retention,
    "user_frustration.verdicts": _frustration,
}


def _numbers_by_word(text: str) -> dict[str, str]:
    """Each number by the word before it ("built in 1857": {"in": "1857"})."""
    words = re.findall(r"[\w,.]+", text.lower())
    return {
        words[i - 1]: w.replace(",", "").rstrip(".")
        for i, w in enumerate(words)
        if i and w[0].isdigit()
    }


_NEGATIONS = frozenset({"not", "no", "never", "isn't", "doesn't", "cannot"})


def _negated(text: str) -> bool:
    return bool(_NEGATIONS & set(text.lower().replace(".", " ").split()))


def _reference_choice(prompt: str, data: dict[str, Any]) -> dict[str, Any]:
    """The reference judges' letter from word sets: answer words S, reference words R.

    A negation on one side only, or no shared word, is a contradiction. Several
    references: the one the answer agrees with best (the prompt's rule).
    """
    answer_text = data["answer"]
    s = content_token_set(answer_text)
    choices = []
    for reference in data["reference_answers"]:
        r = content_token_set(reference)
        clash = _negated(answer_text) != _negated(reference) or not s & r
        if prompt.startswith("answer_correctness."):
            letter = ("D" if clash else "C" if s == r else "A" if s < r
                      else "B" if s > r else "E")  # fmt: skip
        elif prompt.startswith("answer_compliance."):
            letter = "C" if clash else "A" if s <= r else "B"
        else:
            covered = len(s & r) / len(r) if r else 0.0
            letter = ("A" if covered == 1 else "B" if covered >= 0.5 else "C" if covered > 0
                      else "D")  # fmt: skip
        choices.append(letter)
    best = {"answer_correctness.": "CEBAD", "answer_compliance.": "ABC"}.get(
        prompt.split(".")[0] + ".", "ABCD"
    )
    letter = min(choices, key=best.index)
    return {"reason": f"word sets compared with {len(choices)} reference(s)", "choice": letter}


class JudgeServer:
    def __init__(self, port: int = 0) -> None:
        self.behaviour = Behaviour()
        self.seen = Seen()
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._closing: asyncio.Event | None = None
        self.port = port  # 0: a free port, chosen at start

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def _chat(self, request: web.Request) -> web.Response:
        self.seen.arrived.append(asyncio.get_running_loop().time())
        body = await request.json()
        self.seen.requests.append(body)
        response = await self._answer(body)
        self.seen.statuses.append(response.status)
        return response

    async def _answer(self, body: dict[str, Any]) -> web.Response:
        b = self.behaviour
        if b.hang and self._closing is not None and not self._closing.is_set():
            await self._closing.wait()
            return web.json_response({"error": {"message": "closing"}}, status=503)
        if b.delay_s:  # cut short when the server closes: a stopped test waits for nothing
            closing = self._closing.wait() if self._closing else asyncio.sleep(b.delay_s)
            try:
                await asyncio.wait_for(closing, b.delay_s)
            except TimeoutError:
                pass
        if b.status and b.times > 0:
            b.times -= 1
            headers = {"Retry-After": b.retry_after} if b.retry_after else {}
            return web.json_response(
                {"error": {"message": f"status {b.status}"}}, status=b.status, headers=headers
            )
        fmt = body.get("response_format") or {}
        if b.reject_json_schema and fmt.get("type") == "json_schema":
            error = {"message": "response_format json_schema is not supported",
                     "type": "invalid_request_error"}  # fmt: skip
            return web.json_response({"error": error}, status=400)
        system = body["messages"][0]["content"]
        m = _PROMPT.search(system)
        prompt = m.group(1) if m else ""
        if b.invalid_json > 0:
            b.invalid_json -= 1
            content = "Sure! Here is my verdict: supported."
        elif b.ignore_schema > 0:
            b.ignore_schema -= 1
            content = json.dumps({"result": "looks fine"})
        else:
            content = json.dumps(answer(prompt, _data(body["messages"]), b.one_verdict_per_claim))
        prompt_tokens = sum(len(x["content"]) for x in body["messages"]) // 4
        return web.json_response({
            "id": f"chatcmpl-{len(self.seen.requests)}", "object": "chat.completion", "created": 0,
            "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": len(content) // 4,
                      "total_tokens": prompt_tokens + len(content) // 4},
        })  # fmt: skip

    def __enter__(self) -> JudgeServer:
        """Start on ``self.port`` (0: a free one); a bind error (port taken) is raised."""
        started: concurrent.futures.Future[None] = concurrent.futures.Future()

        async def serve() -> None:
            self._closing = asyncio.Event()
            app = web.Application()
            app.router.add_post("/v1/chat/completions", self._chat)
            self._runner = web.AppRunner(app, access_log=None)
            await self._runner.setup()
            await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
            self.port = int(self._runner.addresses[0][1])

        def run() -> None:
            try:
                self._loop.run_until_complete(serve())
            except BaseException as exc:  # the port is taken: tell the caller
                if self._runner is not None:
                    self._loop.run_until_complete(self._runner.cleanup())
                self._loop.close()
                started.set_exception(exc)
                return
            started.set_result(None)
            self._loop.run_forever()

        threading.Thread(target=run, daemon=True).start()
        started.result(60)  # the judge test server did not start within 60s: TimeoutError
        return self

    def release(self) -> None:
        """Answer the requests told to hang (with a 503); later ones do not hang."""
        if self._closing is not None:
            self._loop.call_soon_threadsafe(self._closing.set)

    def __exit__(self, *exc: object) -> None:
        async def close() -> None:
            if self._closing is not None:
                self._closing.set()  # release requests told to hang
            if self._runner is not None:
                await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(60)
        self._loop.call_soon_threadsafe(self._loop.stop)
