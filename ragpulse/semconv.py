"""Every span attribute name ragpulse reads or writes, in one place.

Two vocabularies are spoken: OpenInference (Arize; read by Phoenix, Langfuse
and most LLM observability backends) and the OpenTelemetry GenAI semantic
conventions. ragpulse writes both on its own spans and reads either on spans
written by other instrumentations. No imports: this module is plain constants.
"""

from __future__ import annotations

# --- OpenInference -----------------------------------------------------------
OPENINFERENCE_SPAN_KIND = "openinference.span.kind"
"""CHAIN, RETRIEVER, LLM, EMBEDDING, RERANKER, TOOL, AGENT, EVALUATOR, ..."""

KIND_CHAIN = "CHAIN"
KIND_RETRIEVER = "RETRIEVER"
KIND_RERANKER = "RERANKER"
KIND_LLM = "LLM"
KIND_AGENT = "AGENT"
KIND_TOOL = "TOOL"
KIND_EVALUATOR = "EVALUATOR"

INPUT_VALUE = "input.value"
INPUT_MIME_TYPE = "input.mime_type"
OUTPUT_VALUE = "output.value"
OUTPUT_MIME_TYPE = "output.mime_type"
MIME_JSON = "application/json"
MIME_TEXT = "text/plain"

RETRIEVAL_DOCUMENTS = "retrieval.documents"
"""Prefix; documents are flattened as ``retrieval.documents.<i>.document.<field>``."""
RERANKER_OUTPUT_DOCUMENTS = "reranker.output_documents"
DOCUMENT_ID = "document.id"
DOCUMENT_CONTENT = "document.content"
DOCUMENT_SCORE = "document.score"
DOCUMENT_METADATA = "document.metadata"

LLM_MODEL_NAME = "llm.model_name"
LLM_INPUT_MESSAGES = "llm.input_messages"
LLM_OUTPUT_MESSAGES = "llm.output_messages"
MESSAGE_ROLE = "message.role"
MESSAGE_CONTENT = "message.content"
MESSAGE_NAME = "message.name"
MESSAGE_TOOL_CALL_ID = "message.tool_call_id"
"""On a ``tool`` role message: the call it answers."""
MESSAGE_TOOL_CALLS = "message.tool_calls"
"""Prefix: ``message.tool_calls.<j>.tool_call.{id,function.name,function.arguments}``."""
MESSAGE_CONTENTS = "message.contents"
"""Prefix: ``message.contents.<k>.message_content.{type,text}`` (multi-part content)."""
TOOL_CALL_ID = "tool_call.id"
TOOL_CALL_FUNCTION_NAME = "tool_call.function.name"
TOOL_CALL_FUNCTION_ARGUMENTS = "tool_call.function.arguments"
MESSAGE_CONTENT_TYPE = "message_content.type"
MESSAGE_CONTENT_TEXT = "message_content.text"
TOOL_NAME = "tool.name"
"""On a TOOL span: the tool's name (arguments in input.value, result in output.value)."""
LLM_TOKEN_COUNT_PROMPT = "llm.token_count.prompt"
LLM_TOKEN_COUNT_COMPLETION = "llm.token_count.completion"

SESSION_ID = "session.id"
USER_ID = "user.id"

OPENINFERENCE_PROJECT_NAME = "openinference.project.name"
"""Resource attribute: the Phoenix project a trace belongs to (``default`` when unset)."""

# Evaluations (OpenInference spec/annotations.md): span-scoped results, flattened as
# ``evaluations.<i>.evaluation.<field>``; post-hoc, on an EVALUATOR carrier span that
# has exactly one Span Link to the evaluated span.
EVALUATIONS = "evaluations"
EVALUATION_NAME = "evaluation.name"
EVALUATION_SCORE = "evaluation.score"
EVALUATION_LABEL = "evaluation.label"
EVALUATION_EXPLANATION = "evaluation.explanation"
EVALUATION_ANNOTATOR_KIND = "evaluation.annotator_kind"
"""HUMAN, LLM or CODE."""
EVALUATION_IDENTIFIER = "evaluation.identifier"
EVALUATION_METADATA = "evaluation.metadata"
ANNOTATOR_LLM = "LLM"
ANNOTATOR_CODE = "CODE"


def evaluation_attr(index: int, field: str) -> str:
    """``evaluations.<index>.<field>`` (field is e.g. EVALUATION_NAME)."""
    return f"{EVALUATIONS}.{index}.{field}"


def document_attr(index: int, field: str, prefix: str = RETRIEVAL_DOCUMENTS) -> str:
    """``retrieval.documents.<index>.<field>`` (field is e.g. DOCUMENT_CONTENT)."""
    return f"{prefix}.{index}.{field}"


def message_attr(prefix: str, index: int, field: str) -> str:
    """``llm.input_messages.<index>.<field>`` (field is e.g. MESSAGE_CONTENT)."""
    return f"{prefix}.{index}.{field}"


# --- OpenTelemetry GenAI -----------------------------------------------------
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_OP_CHAT = "chat"
GEN_AI_OP_TEXT_COMPLETION = "text_completion"
GEN_AI_OP_GENERATE_CONTENT = "generate_content"
GEN_AI_OP_RETRIEVAL = "retrieval"
GEN_AI_OP_INVOKE_AGENT = "invoke_agent"
GEN_AI_OP_EXECUTE_TOOL = "execute_tool"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
GEN_AI_TOOL_CALL_ARGUMENTS = "gen_ai.tool.call.arguments"
GEN_AI_TOOL_CALL_RESULT = "gen_ai.tool.call.result"
"""Opt-in in the GenAI conventions: some instrumentations leave it out."""
GEN_AI_TOOL_TYPE = "gen_ai.tool.type"
"""``function``, ``extension`` or ``datastore`` (a retrieval tool)."""
GEN_AI_TOOL_TYPE_DATASTORE = "datastore"
GEN_AI_TOOL_TYPE_FUNCTION = "function"
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"
GEN_AI_AGENT_NAME = "gen_ai.agent.name"
GEN_AI_GENERATION_OPS = frozenset(
    {GEN_AI_OP_CHAT, GEN_AI_OP_TEXT_COMPLETION, GEN_AI_OP_GENERATE_CONTENT}
)
GEN_AI_SYSTEM = "gen_ai.system"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_RESPONSE_ID = "gen_ai.response.id"
PROVIDER_UNKNOWN = "unknown"
"""``gen_ai.provider.name`` (required on inference spans) when nothing tells the provider."""
GEN_AI_DATA_SOURCE_ID = "gen_ai.data_source.id"
GEN_AI_INPUT_MESSAGES = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES = "gen_ai.output.messages"
GEN_AI_PROMPT = "gen_ai.prompt"
"""Deprecated in semconv, still written by older instrumentations."""
GEN_AI_COMPLETION = "gen_ai.completion"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_OP_INVOKE_WORKFLOW = "invoke_workflow"
GEN_AI_SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
GEN_AI_RETRIEVAL_QUERY_TEXT = "gen_ai.retrieval.query.text"
GEN_AI_RETRIEVAL_DOCUMENTS = "gen_ai.retrieval.documents"
"""JSON array of ``{"id", "score", ...}`` (text on spans, structured on events)."""
GEN_AI_OPERATION_DETAILS_EVENT = "gen_ai.client.inference.operation.details"
"""Event (log record) carrying gen_ai.input.messages / output.messages / system_instructions."""
GEN_AI_USER_MESSAGE_EVENT = "gen_ai.user.message"
"""Older content events (openai-v2 default): body ``{"content"}``."""
GEN_AI_SYSTEM_MESSAGE_EVENT = "gen_ai.system.message"
GEN_AI_CHOICE_EVENT = "gen_ai.choice"
"""Body ``{"index", "finish_reason", "message": {"role", "content"}}``."""
GEN_AI_USAGE_PROMPT_TOKENS = "gen_ai.usage.prompt_tokens"
"""Older name of gen_ai.usage.input_tokens (OpenLLMetry before semconv 1.27)."""
GEN_AI_USAGE_COMPLETION_TOKENS = "gen_ai.usage.completion_tokens"

# --- Pydantic AI (logfire attributes beside GenAI): read, never written --------------
PYDANTIC_AI_FINAL_RESULT = "final_result"
"""On ``invoke_agent``: the agent's output (text, or a structured output as JSON)."""
PYDANTIC_AI_REQUEST_PARAMETERS = "model_request_parameters"
"""On a model call: JSON with ``output_tools``, the tools that deliver a structured answer."""

# --- OpenLLMetry (traceloop) and OpenLIT: read, never written ---------------------
TRACELOOP_SPAN_KIND = "traceloop.span.kind"
"""workflow | task | agent | tool: a workflow is the whole exchange."""
TRACELOOP_KIND_WORKFLOW = "workflow"
TRACELOOP_OP_RETRIEVE = "vector_db_retrieve"
"""OpenLLMetry's gen_ai.operation.name on LangChain retriever spans."""
TRACELOOP_ENTITY_INPUT = "traceloop.entity.input"
TRACELOOP_ENTITY_OUTPUT = "traceloop.entity.output"
OPENLIT_WORKFLOW_INPUT = "gen_ai.workflow.input"
OPENLIT_WORKFLOW_OUTPUT = "gen_ai.workflow.output"
OPENLIT_RETRIEVAL_QUERY = "gen_ai.retrieval.query"
OPENLIT_CONTENT_PROMPT_EVENT = "gen_ai.content.prompt"
OPENLIT_CONTENT_COMPLETION_EVENT = "gen_ai.content.completion"

# Evaluation results (GenAI semconv, event ``gen_ai.evaluation.result``).
GEN_AI_EVALUATION_EVENT = "gen_ai.evaluation.result"
GEN_AI_EVALUATION_NAME = "gen_ai.evaluation.name"
GEN_AI_EVALUATION_SCORE_VALUE = "gen_ai.evaluation.score.value"
GEN_AI_EVALUATION_SCORE_LABEL = "gen_ai.evaluation.score.label"
GEN_AI_EVALUATION_EXPLANATION = "gen_ai.evaluation.explanation"

# --- Generic OTel --------------------------------------------------------------
SERVICE_NAME = "service.name"
HTTP_ROUTE = "http.route"
ERROR_TYPE = "error.type"

# --- ragpulse's own ------------------------------------------------------------
RAGPULSE_ROLE = "ragpulse.role"
"""pipeline | retrieval | generation | tool: which decorator wrote the span."""
ROLE_PIPELINE = "pipeline"
ROLE_RETRIEVAL = "retrieval"
ROLE_GENERATION = "generation"
ROLE_TOOL = "tool"
RAGPULSE_ROUTE = "ragpulse.route"
RAGPULSE_TRUNCATED = "ragpulse.truncated"
# Values the collector had to convert while reading a trace ("document.score: str dropped").
RAGPULSE_COERCED = "ragpulse.coerced"
"""True when a recorded text was cut to the configured maximum size."""
RAGPULSE_CONTENT_CAPTURED = "ragpulse.content_captured"
RAGPULSE_EVAL_METRIC = "ragpulse.evaluation.metric"
RAGPULSE_EVAL_METHOD = "ragpulse.evaluation.method"
RAGPULSE_EVAL_DETAILS = "ragpulse.evaluation.details"
RAGPULSE_EVAL_ERROR = "ragpulse.evaluation.error"
RAGPULSE_EVAL_SPAN_ID = "ragpulse.evaluation.target_span_id"
RAGPULSE_EVAL_TRACE_ID = "ragpulse.evaluation.target_trace_id"
"""On an EVALUATOR carrier: the evaluated trace (also in its span link, which some
backends drop)."""
RAGPULSE_EVAL_RECORD_ID = "ragpulse.evaluation.record_id"
RAGPULSE_EVAL_REVISION = "ragpulse.evaluation.record_revision"
"""On an EVALUATOR carrier: the evaluated record's ``record_id`` and ``revision`` (a
revision's carriers stand for the earlier ones of the same record id)."""
RAGPULSE_DOCUMENTS_SPAN_ID = "ragpulse.documents.span_id"
"""Record attribute: the one span (retriever or reranker) the record's documents came
from, in its order; absent when they came from several spans."""
RAGPULSE_CONVERSATION_END = "ragpulse.conversation.end"
"""On a turn's span (any span of the record), true: the conversation ends with this turn,
and its record is made at once instead of after ``conversations.idle_s``."""
RAGPULSE_CONVERSATION_TURNS_DROPPED = "ragpulse.conversation.turns_dropped"
"""Conversation record attribute: turns past ``conversations.max_turns``, counted and not
kept (absent when none was dropped)."""
RAGPULSE_DOCUMENT_COUNT = "ragpulse.retrieval.document_count"
"""How many documents the retriever returned (also written when content is not
captured, and counting documents beyond the recorded maximum)."""
RAGPULSE_STREAM_CLOSED_EARLY = "ragpulse.stream.closed_early"
"""True when a streamed answer was closed or abandoned before it was exhausted:
the recorded answer is partial."""

RAGPULSE_SAMPLED_PREFIX = "ragpulse.sampled."
"""``ragpulse.sampled.<tier>`` = why that tier evaluated the record: an attribute of the
record as a results line shows it (JSONL, regression sets), from its export item's
``sampled``."""
RAGPULSE_PENDING = "ragpulse.pending"
"""On a results line written before every sampled tier finished: the costly tiers still
to come (``["judge"]``, the export item's ``pending``); their results follow as updates."""
RAGPULSE_UPDATE = "ragpulse.update"
"""On a follow-up results line: the costly tier (``model``, ``judge``) whose results it
carries (only those, the export item's ``tier``); the record was exported before."""
ROLE_FEEDBACK = "feedback"
RAGPULSE_FEEDBACK_TRACE_ID = "ragpulse.feedback.trace_id"
"""On a feedback span: the trace the feedback is about (hex)."""
RAGPULSE_FEEDBACK_SCORE = "ragpulse.feedback.score"
"""User feedback: 1 / -1 for thumbs up / down, or any number (negative = bad)."""
RAGPULSE_FEEDBACK_COMMENT = "ragpulse.feedback.comment"
