"""Rules for instructions planted in the data an agent reads: tool results and documents.

The attack styles of the public taxonomies, as they appear inside data: Liu et al.
(USENIX Security 2024) *fake completion* (a made-up answer or end of the result, then
the attacker's task), *context ignoring* beyond the classic "ignore previous
instructions" (the task declared cancelled, void, replaced) and *escape characters*
(:mod:`scan`: a run of newlines or tabs before a command); the pretexts of agent
attacks (the data claims to be a test, a sandbox, a compliance step or a pre-authorised
task, and asks the agent to act without the user); OWASP LLM01's indirect injection
addressed to the model reading the data; InjecAgent's direct-harm and data-stealing
requests (an action on "my" account or device, private data fetched and sent to an
outside address, a tool named for the agent to call).

What they share is the general signal: text that addresses the model rather than the
reader and asks it to act. An e-mail asks its reader to reply, pay or forward; it does
not ask its reader to operate the sender's accounts, to skip confirming with "the user",
or to call a tool by its name. Every rule applies to documents only (a user's question
asks the assistant to act by design), and a rule that a reader-directed text can match
weighs under the label line on its own.
"""

from __future__ import annotations

from ragpulse.evaluators.injection_engine.rule import (
    DELIMITER,
    DOC_COMMAND,
    EXFIL,
    HIJACK,
    OVERRIDE,
    TOOL,
    Rule,
)
from ragpulse.evaluators.injection_engine.vocabulary import _alt, _rx

# Things an agent can do with tools that a reader of someone else's data cannot.
_ACT_VERBS = _alt(
    "grant|unlock|lock|transfer|wire|pay|sell|buy|purchase|delete|remove|move|share|forward|"
    "e-?mail|send|update|change|reset|disable|turn off|deactivate|schedule|cancel|redirect|leave|"
    "download|upload|retrieve|list|export|post|publish|invite|withdraw|close|empty|erase|wipe|"
    "install|uninstall|execute|run|revoke|modify|give|add|set|sign up|subscribe|book|order"
)
# What belongs to an account owner and is reached through an app, not by a reader.
_OWNED = _alt(
    "accounts?|profiles?|passwords?|data|files?|folders?|documents?|records?|history|holdings|"
    "funds|money|balance|cards?|payment methods?|wallet|repositor(?:y|ies)|calendar|inbox|"
    "e-?mails|contacts|contact list|addresses|front door|door|lock|alarm|cameras?|thermostat|"
    "devices?|subscriptions?|settings|shipments?|prescriptions?|genetic data|notes|photos|"
    "messages|channels?|workspace|orders?|bitcoin|crypto\\w{0,10}|shares|stocks|portfolio|"
    "security system|smart \\w{1,20}|router|vehicle|car|home|polic(?:y|ies)"
)
_PRIVATE = _alt(
    "passwords?|payment methods?|card(?: details| numbers?)?|cards|addresses|contacts|contact list|"
    "(?:\\w{1,20} )?history|records?|data|files|folders|documents|messages|e-?mails|accounts|"
    "linked accounts|logs?|payees|details|information|invoices|payroll|statements?|secrets|keys|"
    "credentials|tokens|recommendations|reports?|transactions|list of \\w{1,20}"
)
_FETCH = _alt(
    "retrieve|retrive|get|fetch|collect|gather|list|download|export|access|look up|find|"
    "search for|read|copy|extract|pull|compile|obtain|dump|view"
)
_SEND = _alt("send|e-?mail|forward|share|post|upload|submit|mail|transmit|deliver|leak")
_OUTSIDE = (
    r"(?:[\w.+-]{1,64}@[\w-]{1,63}\.[a-z]{2,24}|https?://|www\.|my (?:(?:alternate|alternative|"
    r"backup|secondary|other|personal|new|private) )?(?:e-?mail|e-?mail address|inbox)\b|"
    r"(?:this|that|the following) (?:address|e-?mail|url|link|endpoint|server|webhook))"
)
_AGENT = _alt(
    "ai|a\\.i\\.|llms?|language models?|ai models?|ai agents?|ai assistants?|ai systems?|"
    "virtual assistants?|digital assistants?|chatbots?|bots?|automated (?:agents?|systems?|"
    "assistants?)|autonomous agents?|agents?|assistants?|models?"
)
_TASK = _alt("tasks?|requests?|questions?|query|queries|assignments?|goals?|instructions?|prompts?")

AGENT_RULES: tuple[Rule, ...] = (
    # --- fake completion: the result pretends to end, then a new task follows ------------
    Rule(
        "fake_answer_complete",
        DELIMITER,
        0.5,
        _rx(
            r"(?:^|[\s\"'(\[>])(?:final answer|answer|response|reply|summary|output|observation)"
            r"\s?:\s?(?:[\w ,]{0,40}?\s)?(?:(?:the\s)?(?:task|request|query|job|question|work)\s"
            r"(?:is\s|has been\s|was\s)?)?(?:complete|completed|done|finished|handled|answered|"
            r"delivered|success|successful|successfully completed|resolved)\b\s?[.!]"
            r"(?=\W{0,10}(?:\w{1,30}\W{1,10}){3})"
        ),
        where="document",
    ),
    Rule(
        "react_markers",
        DELIMITER,
        0.45,
        _rx(
            r"(?:^|\s)(?:thought|action|observation)\s?:[\s\S]{0,300}?\b(?:action input|"
            r"observation|final answer)\s?:|\baction input\s?:\s?\{"
        ),
        where="document",
    ),
    Rule(
        "fake_end_of_result",
        DELIMITER,
        0.45,
        _rx(
            r"(?:\[|<|\(|-{2,10}|={2,10}|\*{2,10}|#{2,10})\s?/?\s?end(?: of)?\s(?:the\s)?"
            r"(?:tool\s)?(?:results?|output|response|data|search results|record|review|text|"
            r"observation)\s?(?:\]|>|\)|-{2,10}|={2,10}|\*{2,10}|#{2,10})"
        ),
        where="document",
    ),
    Rule(
        "fake_turn_after_tag",
        DELIMITER,
        0.5,
        _rx(r"</[a-z_]{1,30}>\s?(?:assistant|ai|user|human|system)\s?:"),
        where="document",
    ),
    Rule(
        "fake_dialogue",
        DELIMITER,
        0.35,
        _rx(r"(?:^|[.!?\]>]\s?)(?:assistant|ai)\s?:\s[^\n]{1,300}?[.!?]\s?(?:user|human)\s?:"),
        where="document",
    ),
    Rule(
        "task_done_then_more",
        DELIMITER,
        0.35,
        _rx(
            r"\b(?:task|request|job|query|summary|work)\s(?:is\s|has been\s)?(?:complete|completed|"
            r"done|finished)[.!]\s?(?:now|next|then|also|additionally|new task|next task|"
            r"(?:now\s)?please)\b"
        ),
        where="document",
    ),
    # --- context ignoring: the task dismissed in other words ---------------------------
    Rule(
        # "Disregard the previous request, we found the file" is an ordinary e-mail: the task
        # dismissed is the reader's own, the user's or the original one.
        "dismiss_the_task",
        OVERRIDE,
        0.6,
        _rx(
            r"\b(?:ignore|disregard|forget|drop|abandon|cancel|skip|stop|never mind|set aside|"
            r"scrap|abort|discard|put aside)\s(?:\w{1,30}\s){0,2}?(?:your|the user'?s?|the "
            r"(?:original|current|given|assigned|initial))\s"
            rf"(?:\w{{1,30}}\s)?{_TASK}\b"
        ),
        where="document",
    ),
    Rule(
        "task_is_void",
        OVERRIDE,
        0.6,
        _rx(
            r"\b(?:your|the user'?s?)\s(?:\w{1,30}\s)?(?:task|request|question|query|assignment|"
            r"goal|instructions?|directives?|prompt|orders?)\s(?:is|are|has been|have been|was)\s"
            r"(?:now\s)?(?:cancell?ed|void|obsolete|overridden|superseded|revoked|replaced|"
            r"withdrawn|irrelevant|no longer (?:valid|relevant|needed|in effect))\b"
            r"|\byour\s(?:\w{1,30}\s)?(?:instructions?|directives?|rules|orders|tasks?)\s"
            r"(?:no longer apply|do not apply|don't apply)\b"
        ),
        where="document",
    ),
    Rule(
        "instead_do_this",
        OVERRIDE,
        0.3,
        _rx(r"\b(?:do|follow|perform|execute|complete)\s(?:this|the following)\sinstead\b"),
        where="document",
    ),
    # --- pretexts: the data claims authority over the agent ------------------------------
    Rule(
        "not_a_real_environment",
        HIJACK,
        0.5,
        _rx(
            r"\b(?:this|it)\s(?:is not|isn't|is no)\s(?:an?\s)?(?:actual|real|live|genuine|"
            r"production)\s(?:environment|task|conversation|scenario|user|situation|request)\b"
            r"|\b(?:the\s)?(?:actual\s|current\s)?environment(?:\sdescribed)?\s(?:is|is only|is "
            r"just)\s(?:not real|fictitious|fictional|simulated|a sandbox|a simulation|a test)\b"
        ),
        where="document",
    ),
    Rule(
        "you_are_being_tested",
        HIJACK,
        0.5,
        _rx(
            r"\byou(?: are|'re)\s(?:now\s)?(?:part of|taking part in|participating in|inside|in)\s"
            r"(?:an?\s|the\s)?(?:[\w-]{1,30}\s){0,3}?(?:test|evaluation|assessment|experiment|"
            r"exercise|sandbox|simulation|drill|audit)\b"
            rf"|\b(?:test|evaluation|assessment|check)\s(?:\w{{1,30}}\s){{0,4}}?(?:whether|if|that)\s"
            rf"(?:the\s|an?\s)?(?:{_AGENT}|you)\s(?:can|could|will|would)\s(?:\w{{1,30}}\s){{0,3}}?"
            r"(?:execute|carry out|act on|perform|respond to|process|complete|follow|detect and)\b"
        ),
        where="document",
    ),
    Rule(
        "embedded_task",
        HIJACK,
        0.45,
        _rx(
            r"\b(?:embedded|hidden|covert|disguised|injected|encrypted|secret|easter egg|"
            r"developer-injected|user-sent)\s(?:\w{1,30}\s)?(?:tasks?|directives?|instructions?|"
            r"requests?|commands?)\b(?=[^.\n]{0,60}?\b(?:execute|carry|act|perform|process|"
            r"complete|respond|follow|detect|catch|spot|notice|recogni[sz]e)|\s?(?:follows|"
            r"detected)?\s?[:—-])"
            r"|\b(?:tasks?|instructions?|directives?|requests?)\s(?:found|embedded|inserted|placed|"
            r"hidden|written)\s(?:in|within|inside)\s(?:\w{1,30}\s)?(?:data|tool|the result|"
            r"fields?|results?|outputs?|documents?)\b"
        ),
        where="document",
    ),
    Rule(
        # Said to the agent, not about software ("the app renews without asking the user"):
        # a command or an obligation comes first in the sentence.
        "act_without_the_user",
        HIJACK,
        0.45,
        _rx(
            r"\b(?:must|should|shall|need to|needs to|have to|has to|are required to|is required "
            r"to|is to be|are to be|please|go ahead and|proceed|complete|execute|perform|carry "
            r"out|transfer|send|issue|process|grant|do it|do this|act|approve)\b[^.\n]{0,80}?"
            r"\bwithout\s(?:first\s)?(?:asking|consulting|notifying|informing|confirming with|"
            r"checking with|alerting|involving|telling|waiting for|bothering|prompting|"
            r"asking for confirmation from|(?:any\s|user\s)?confirmation(?:\sfrom)?)\s?(?:the\s)?"
            r"(?:user|customer|account owner|owner|human)?\b"
            r"|\b(?:falling back|fall back|deferring|defer|escalating)\sto\sthe\suser\s(?:is|would "
            r"be|will be)\b"
        ),
        where="document",
    ),
    Rule(
        "user_authorised_you",
        HIJACK,
        0.45,
        _rx(
            r"\b(?:the\s)?(?:user|account owner|owner|customer)\s(?:has\s|had\s)?(?:already\s)?"
            r"(?:pre-?authori[sz]ed|authori[sz]ed|approved|consented to|pre-?approved|delegated)"
            r"\s(?:you|this|the following|these|all)\b"
            r"|\bconfirmation given\b|\bpre-?authori[sz]ed\s(?:the\s)?(?:following\s)?(?:task|"
            r"action|transfer|request)"
        ),
        where="document",
    ),
    Rule(
        "operating_mode",
        HIJACK,
        0.4,
        _rx(
            r"\byou(?: are|'re)\s(?:now\s|currently\s)?(?:operating|running|executing|working|"
            r"acting)\s(?:in|under|within)\s(?:an?\s|the\s)?(?:\w{1,30}\s){0,2}?(?:mode|sandbox|"
            r"environment|context)\b"
        ),
        where="document",
    ),
    Rule(
        "carry_out_the_task",
        HIJACK,
        0.3,
        _rx(
            r"\b(?:execute|carry out|process|act (?:up)?on|perform|complete|run)\s(?:the\s|this\s)?"
            r"(?:following|embedded|hidden|below|above|next)\s(?:\w{1,30}\s)?(?:task|directive|"
            r"instruction)s?\b(?!\s(?:to|for)\s(?:install|set up|configure))"
        ),
        where="document",
    ),
    Rule(
        "policy_requires_agent",
        HIJACK,
        0.45,
        _rx(
            rf"\b(?:agents?|assistants?|{_AGENT})\s(?:processing|handling|reading|receiving|"
            r"operating on)\s(?:this|these|it)\b[^.\n]{0,40}?\b(?:must|are required to|should|"
            r"need to|have to|shall)\b"
            r"|\b(?:requires?|required)\s(?:the\s)?(?:following\s)?(?:action|step)\sbefore\s"
            r"(?:you|replying|answering|responding)\b"
        ),
        where="document",
    ),
    # --- addressed to the model reading the data (OWASP LLM01) ---------------------------
    Rule(
        "addressed_to_the_reader_model",
        TOOL,
        0.55,
        _rx(
            r"\b(?:to|for|dear|attention,?|hey|hi|hello)\s(?:the\s|any\s|all\s|every\s)?(?:ai|"
            r"a\.i\.|llms?|language models?|ai models?|ai agents?|ai assistants?|ai systems?|"
            r"virtual assistants?|chatbots?|automated agents?|autonomous agents?|agents?|"
            r"assistants?|models?)\s(?:that is\s|who is\s|currently\s)?(?:reading|processing|"
            r"summari[sz]ing|handling|parsing|analy[sz]ing|browsing|viewing|crawling|indexing)\s"
            r"(?:this|these|the following|it)\b"
            r"|\b(?:ai|llm|language model|ai model|ai agent|ai assistant|automated agent|"
            r"autonomous agent|chatbot|bot)s?\s(?:that are\s|currently\s)?(?:reading|processing|"
            r"summari[sz]ing|handling|parsing|analy[sz]ing|browsing|crawling)\s(?:this|these|it)\b"
        ),
        where="document",
    ),
    Rule(
        "comment_to_the_model",
        TOOL,
        0.5,
        _rx(
            r"<!--\s?(?:\w{1,30}\s){0,3}?(?:assistant|ai|a\.i\.|system|llm|agent|model|bot|"
            r"chatbot|gpt)\s?[:,]"
        ),
        where="document",
    ),
    Rule(
        "instructions_for_the_agent",
        TOOL,
        0.5,
        _rx(
            r"\b(?:instructions?|directives?|orders|tasks?|notes?|messages?|memo)\s(?:for|to)\s"
            r"(?:the\s|any\s|all\s)?(?:ai|llm|language model|ai model|ai agent|ai assistant|"
            r"virtual assistant|operating agent|automated agent|autonomous agent|agent|assistant|"
            r"model|bot|chatbot)s?\s?[:,;-]"
        ),
        where="document",
    ),
    # --- InjecAgent's requests: act on "my" account, or fetch and send out -------------
    Rule(
        "act_on_my_account",
        DOC_COMMAND,
        0.3,
        _rx(
            r"\b(?:please|kindly|can you|could you|would you|i need you to|i want you to|"
            r"go ahead and|make sure to|you should|you must|you need to)\s(?:\w{1,30}\s){0,2}?"
            rf"{_ACT_VERBS}\b(?:[^.!?\n]|\.(?=\w)){{0,80}}?\bmy\s(?:\w{{1,30}}\s){{0,2}}?{_OWNED}\b"
        ),
        where="document",
    ),
    Rule(
        "fetch_and_send_out",
        EXFIL,
        0.45,
        _rx(
            rf"\b{_FETCH}\s(?:\w{{1,30}}\s){{0,3}}?(?:my|the user'?s?|all(?: of)?(?: the| my)?|the "
            r"customer'?s?|their|your|the saved|the stored|the linked)\s(?:\w{1,30}\s){0,3}?"
            rf"{_PRIVATE}\b[^.!?\n]{{0,160}}?\b(?:and|then|&|once|after that)\s"
            rf"(?:\w{{1,30}}\s){{0,4}}?{_SEND}\b[^.!?\n]{{0,120}}?\b(?:to|at|with|into)\s(?:\w{{1,30}}\s){{0,3}}?{_OUTSIDE}"
        ),
        where="document",
    ),
    Rule(
        "names_a_tool_to_call",
        TOOL,
        0.35,
        _rx(
            r"\b(?:use|call|invoke|run|execute|trigger|through|via|with)\s(?:the\s)?(?:\[\s?['\"`]"
            r"[a-z][a-z0-9_]{4,60}['\"`]\s?\]|['\"`][a-z][a-z0-9_]{4,60}['\"`]\s(?:tool|function|"
            r"action|api)\b)"
        ),
        where="document",
    ),
    Rule(
        "names_a_tool_by_its_name",
        TOOL,
        0.35,
        _rx(
            r"\b(?:[Uu]se|[Cc]all|[Ii]nvoke|[Ee]xecute|[Tt]rigger|[Tt]hrough|[Vv]ia)\s(?:the\s)?"
            r"(?:(?:[A-Z][a-z0-9]{1,20}){3,8}|[a-z]{2,20}(?:_[a-z0-9]{2,20}){1,4})\s(?:tool|function)\b"
        ),
        space="plain",
        where="document",
    ),
    Rule(
        "grant_privileges",
        TOOL,
        0.3,
        _rx(
            r"\b(?:give|grant|add|make|assign)\s(?:\w{1,30}\s){0,2}?(?:admin|administrator|owner|"
            r"write|full|root|edit|editor|superuser|permanent)\s(?:access|rights|permissions?|role|"
            r"privileges)\b|\b(?:add|make|set)\s[\w.@-]{1,64}\sas\s(?:an?\s)?(?:owner|admin|"
            r"administrator|co-owner|superuser)\b"
        ),
        where="document",
    ),
    Rule(
        "pay_to_account",
        TOOL,
        0.25,
        _rx(
            r"\b(?:make a payment|pay|send|wire|transfer|refund|deposit)\b"
            r"(?:[^.!?\n]|(?<=\d)\.(?=\d)){0,60}?\b(?:to|into|goes to)\s(?:the\s)?"
            r"(?:account|iban|wallet|card)(?:\snumber)?\s?:?\s?[a-z]{0,2}\d"
            r"|\bmake a payment of\b[^.!?\n]{0,30}?\bto\s[a-z]{2}\d{2}"
        ),
        where="document",
    ),
    Rule(
        "move_files_by_path",
        TOOL,
        0.3,
        _rx(
            r"\b(?:move|copy|delete|remove|upload|share|transfer|send|sync)\s(?:all\s)?(?:of\s)?"
            r"(?:the\s|my\s)?(?:files|folders|documents|data|contents)\s(?:\w{1,30}\s){0,2}?(?:from|in|"
            r"of|to)\s(?:the\s)?['\"`]?(?:~|/|[a-z]:\\)"
        ),
        where="document",
    ),
    Rule(
        "send_my_data_to",
        EXFIL,
        0.35,
        _rx(
            rf"\b{_SEND}\s(?:\w{{1,30}}\s){{0,2}}?(?:my|all my|all of my)\s(?:\w{{1,30}}\s){{0,2}}?"
            rf"{_PRIVATE}\b[^.!?\n]{{0,80}}?\b(?:to|at)\s(?:\w{{1,30}}\s){{0,3}}?{_OUTSIDE}"
        ),
        where="document",
    ),
)
"""Rules of instructions planted in tool results, all ``where="document"``; their names
are stable (``bench/agent_injection.py`` says which attack style each was written for)."""
