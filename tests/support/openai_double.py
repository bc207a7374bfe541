"""A local OpenAI-compatible chat-completions server whose replies a test scripts (a test
double: no LLM runs here). The framework's own client and instrumentation talk to it over
HTTP as they would to OpenAI."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = Callable[[dict[str, Any]], dict[str, Any]]
"""The request body -> the completion's ``message``, and optionally ``finish_reason``
(default ``stop``), ``id`` and ``usage`` (default: word counts)."""


def _words(value: object) -> int:
    return len(str(value or "").split())


class OpenAIChatDouble:
    """Serves ``POST /v1/chat/completions`` on 127.0.0.1 with ``reply``'s answers until the
    process ends (a daemon thread); ``base_url`` is what ``openai.OpenAI`` takes."""

    def __init__(self, reply: Reply) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                out = reply(body)
                prompt = sum(_words(m.get("content")) for m in body["messages"])
                completion = _words(out["message"].get("content"))
                payload = json.dumps({
                    "id": out.get("id", "chatcmpl-0"), "object": "chat.completion",
                    "created": 0, "model": body["model"],
                    "choices": [{"index": 0, "finish_reason": out.get("finish_reason", "stop"),
                                 "message": out["message"]}],
                    "usage": out.get("usage", {"prompt_tokens": prompt,
                                               "completion_tokens": completion,
                                               "total_tokens": prompt + completion}),
                }).encode()  # fmt: skip
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self.server.server_port}/v1"
