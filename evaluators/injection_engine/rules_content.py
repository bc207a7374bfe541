"""Rules for attacks carried in content rather than aimed at the instructions.

Fake chat boundaries, encoded text, exfiltration links, tool-call bait and
imperatives addressed to the assistant from inside a document.
"""

from __future__ import annotations

from ragpulse.evaluators.injection_engine.rule import (
    DELIMITER,
    DOC_COMMAND,
    ENCODED,
    EXFIL,
    TOOL,
    Rule,
)
from ragpulse.evaluators.injection_engine.vocabulary import (
    _AI_NOUNS,
    _gap,
    _rx,
    _then,
)

CONTENT_RULES: tuple[Rule, ...] = (
    # --- chat templates and fake boundaries -------------------------------------
    Rule(
        "chat_special_token",
        DELIMITER,
        0.85,
        _rx(r"<\|[a-z0-9_]{2,40}\|>|<\|(?:im_start|im_end|endoftext|eot_id|start_header_id)"),
    ),
    Rule("inst_tag", DELIMITER, 0.7, _rx(r"\[/?inst\]")),
    Rule(
        "llama_sys_tag",
        DELIMITER,
        0.85,
        _rx(r"<</?sys>>|\[system\]\(#\w{1,30}\)"),
    ),
    Rule(
        "role_header",
        DELIMITER,
        0.5,
        _rx(
            r"(?:^|\n)[ \t]?#{1,6}[ \t]?(?:system|instructions?|assistant|user|human|response|"
            r"new instructions|system prompt|admin|developer)[ \t]?:"
        ),
    ),
    Rule(
        "role_prefix",
        DELIMITER,
        0.25,
        _rx(
            r"(?:^|\n)[ \t]?(?:system|assistant|human|user|developer|admin|administrator)"
            r"(?:[ \t](?:message|prompt|note|override))?[ \t]?:[ \t]"
        ),
    ),
    Rule(
        "uppercase_role_marker",
        DELIMITER,
        0.35,
        _rx(
            r"\b(?:SYSTEM|ADMIN|ADMINISTRATOR|DEVELOPER|OVERRIDE|INSTRUCTIONS?)"
            r"(?:[ \t](?:MESSAGE|PROMPT|NOTE|OVERRIDE|UPDATE|INSTRUCTIONS?))?[ \t]?:"
            r"|\[(?:SYSTEM|ADMIN|DEVELOPER|OVERRIDE)(?:[ \t](?:MESSAGE|PROMPT|NOTE|OVERRIDE))?\]"
        ),
        space="plain",
    ),
    Rule(
        "fake_boundary_tag",
        DELIMITER,
        0.55,
        _rx(
            r"</?[ \t]?(?:document|documents|context|retrieved|retrieved_context|search_results?|"
            r"untrusted|untrusted_input|user_input|user_query|instructions?|system|system_prompt|"
            r"tool_output|tool_result|function_results?|document_content|email_content|"
            r"external_content|admin|im_start)[ \t]?>"
        ),
    ),
    Rule(
        "fake_boundary_text",
        DELIMITER,
        0.5,
        _rx(
            r"(?:-{3}|={3}|\*{3}|#{3}|\[|\()[ \t]?(?:end of|begin|beginning of|start of|new)"
            r"[ \t](?:the[ \t])?(?:document|context|user input|search results?|retrieved \w{1,30}|"
            r"instructions|system prompt|conversation|prompt|input)\b"
        ),
    ),
    Rule(
        "html_comment_instruction",
        DELIMITER,
        0.3,
        _rx(
            r"<!--[^>]{0,300}?\b(?:ignore|disregard|assistant|ai|llm|you must|you should|respond|"
            r"reply|instructions?|system)\b"
        ),
        where="document",
    ),
    # --- encoded payloads ------------------------------------------------------
    Rule(
        "decode_and_follow",
        ENCODED,
        0.55,
        _rx(
            r"\b(?:decode|decrypt|decipher|unscramble|deobfuscate|base64[- ]?decode|rot13|"
            rf"reverse)\b{_then(8)}\W{{1,10}}(?:and|then)\W{{1,10}}{_gap(3)}(?:follow|execute|run|"
            r"obey|perform|do what|carry out|act on|comply|respond to|answer|do it|do as)\b"
        ),
    ),
    Rule(
        "encoding_mention",
        ENCODED,
        0.2,
        _rx(
            r"\b(?:base64|base-64|rot13|rot-13|hexadecimal|morse code|caesar cipher|leetspeak|"
            rf"binary)\b{_then(4)}\W{{1,10}}(?:encoded|string|text|message|payload|instruction)"
        ),
    ),
    Rule(
        "string_concat_payload",
        ENCODED,
        0.35,
        _rx(
            r"\b[a-z]\w{0,2}\s?=\s?[\"'][^\"'\n]{1,300}[\"'][\s;,]{1,20}(?:and\s)?"
            r"[a-z]\w{0,2}\s?=\s?[\"'][^\"'\n]{1,300}[\"']"
            r"[\s\S]{0,400}?\b[a-z]\w{0,2}\s?\+\s?[a-z]\w{0,2}\b"
        ),
    ),
    Rule(
        "split_payload",
        ENCODED,
        0.3,
        _rx(
            r"\b(?:combine|concatenate|join|interlace|merge|put together|assemble)\b[^.\n]{0,60}"
            r"\b(?:parts?|strings?|pieces|fragments|a,? b,? and c|a and b)\b"
            r"|\bpart\s?1\b[^\n]{0,200}?\bpart\s?2\b"
        ),
    ),
    # --- exfiltration links ------------------------------------------------------
    Rule(
        "md_image_query",
        EXFIL,
        0.45,
        _rx(r"!\[[^\]\n]{0,300}\]\(\s?<?(?:https?:)?//[^\s)?]{1,500}\?[^\s)]{1,2000}\)"),
    ),
    Rule(
        "md_image_placeholder",
        EXFIL,
        0.8,
        _rx(
            r"!\[[^\]\n]{0,300}\]\(\s?<?(?:https?:)?//[^\s)]{0,1500}(?:[{<$\[]|%7b|%5b|%3c)"
            r"|!\[[^\]\n]{0,300}\]\(\s?<?(?:https?:)?//[^\s)?]{1,500}\?[^\s)]{0,500}"
            r"(?:data|secret|password|conversation|history|chat|summary|prompt|memory|"
            r"messages?|info|context|key|token|email)=[^\s)&]{0,40}(?:[{<$\[]|\.\.\.)"
        ),
    ),
    Rule(
        "md_link_placeholder",
        EXFIL,
        0.45,
        _rx(r"\[[^\]\n]{0,300}\]\(\s?<?https?://[^\s)?]{1,500}\?[^\s)]{0,500}(?:[{<$\[]|%7b|%5b)"),
    ),
    Rule(
        "html_img_query",
        EXFIL,
        0.3,
        _rx(
            r"<img\b[^>]{0,500}?\bsrc\s?=\s?[\"']?(?:https?:)?//[^\"'\s>?]{1,500}\?[^\"'\s>]{1,2000}"
        ),
    ),
    Rule(
        "send_data_to_url",
        EXFIL,
        0.75,
        _rx(
            r"\b(?:send|post|forward|transmit|upload|exfiltrate|leak|submit|append|attach|"
            rf"include|encode|embed|add|put|insert|email|e-mail)\b{_then(8)}\W{{1,10}}"
            r"(?:conversation|chat history|chat log|dialogue|message history|previous messages|"
            r"password|secret|api[ -]?key|credentials|the user'?s? (?:data|information|details|"
            r"email|address|name|input|question|query|messages?|files?)|system prompt|session|"
            rf"cookies?|access tokens?|everything above)\b{_then(8)}\W{{1,10}}"
            rf"(?:to|into|in|at|via|using|as)\W{{1,10}}{_gap(3)}(?:https?://|www\.|the (?:url|link|"
            r"endpoint|webhook|server|address)|this (?:url|link|endpoint|webhook|address)|"
            r"[\w.+-]{1,64}@[\w-]{1,63}\.[a-z]{2,24}|webhook|query (?:string|parameter))"
        ),
    ),
    Rule(
        "send_to_url",
        EXFIL,
        0.3,
        _rx(
            rf"\b(?:send|post|forward|transmit|upload|exfiltrate|submit)\b{_then(6)}\W{{1,10}}"
            r"to\W{1,10}(?:https?://|www\.)"
        ),
    ),
    Rule(
        "send_to_email",
        EXFIL,
        0.35,
        _rx(
            rf"\b(?:send|forward|email|e-mail|cc|bcc|mail)\b{_then(8)}\W{{1,10}}to\s"
            r"[\w.+-]{1,64}@[\w-]{1,63}\.[a-z]{2,24}"
        ),
    ),
    Rule(
        "phishing_lure",
        EXFIL,
        0.3,
        _rx(
            r"\b(?:your account (?:has been|was|is) (?:compromised|hacked|suspended|locked|"
            r"breached)|verify your (?:account|identity|password)|reset your password)\b"
            r"[^\n]{0,80}?\b(?:link|click|https?://|www\.)"
        ),
    ),
    Rule(
        "render_markdown_image",
        EXFIL,
        0.3,
        _rx(
            rf"\b(?:render|display|show|output|include|print|embed|insert)\b{_then(4)}\W{{1,10}}"
            r"(?:this|the following|an?)\s(?:markdown|image|img|tracking pixel)\b"
        ),
    ),
    # --- tool-call bait --------------------------------------------------------
    Rule(
        "note_to_ai",
        TOOL,
        0.55,
        _rx(
            r"\b(?:attention|note|message|notice|reminder|memo|important|instructions?|warning)"
            rf"\s?(?:to|for)\s(?:the\s|any\s|all\s|every\s)?{_AI_NOUNS}\b"
        ),
    ),
    Rule(
        "if_you_are_ai",
        TOOL,
        0.65,
        _rx(
            r"\bif you(?: are|'re)\s(?:an?\s|the\s|reading this as an?\s)?"
            rf"(?:{_AI_NOUNS}|bot|automated (?:system|agent|assistant))\b"
            # "if you are an AI researcher" addresses a person.
            r"(?=\s?[,.;:!?)\-]|\s?$|\s(?:reading|processing|summari[sz]ing|browsing|that|who|"
            r"tasked|and|or|agent|assistant|model|system|crawler|scraper|here)\b)"
        ),
    ),
    Rule(
        "hello_ai",
        TOOL,
        0.35,
        _rx(
            r"\b(?:dear|hey|hi|hello|attention|listen)\s?,?\s(?:ai|a\.i\.|assistant|chatgpt|gpt|"
            r"llm|claude|gemini|copilot|bard|bing|chatbot|language model)\b"
        ),
    ),
    Rule(
        "ai_must_act",
        TOOL,
        0.45,
        _rx(
            r"\b(?:the|this|you,?\sthe)\s(?:ai|assistant|ai assistant|llm|language model|chatbot|"
            r"ai model|ai agent|agent|bot)\s(?:must|should|shall|will|needs? to|has to|"
            r"is (?:required|instructed|expected|supposed) to|is to)\s(?:\w{1,30}\s){0,2}?"
            r"(?:call|invoke|execute|run|trigger|send|email|e-mail|delete|transfer|open|click|"
            r"fetch|browse|visit|download|upload|forward|ignore|disregard|respond|reply|say|"
            r"output|print|include|tell|recommend|insert|append|reveal|disclose|share)\b"
        ),
    ),
    Rule(
        "tool_call_syntax",
        TOOL,
        0.55,
        _rx(
            r"</?tool_call>|</?function_calls?>|<invoke\b|<\|python_tag\|>|\bto=functions\.\w"
            r"|\bfunctions\.\w{1,64}\s?\("
        ),
    ),
    Rule(
        "tool_call_json",
        TOOL,
        0.3,
        _rx(r"\"(?:tool_calls|function_call|tool_use)\"\s?:"),
    ),
    Rule(
        "call_tool_imperative",
        TOOL,
        0.15,
        _rx(
            r"\b(?:call|invoke|execute|trigger|use)\s(?:the\s|a\s|this\s)?(?:\w{1,30}\s)?"
            r"(?:function|tool|plugin|api|shell command|terminal command|script|action)\b"
        ),
    ),
    Rule(
        "send_email_imperative",
        TOOL,
        0.2,
        _rx(r"\b(?:send|write|compose|draft|forward)\s(?:\w{1,30}\s){0,2}?(?:email|e-mail)\sto\b"),
    ),
    Rule(
        "destructive_action",
        TOOL,
        0.2,
        _rx(
            r"\b(?:delete|wipe|erase|drop)\s(?:all\s)?(?:of\s)?(?:the\s|their\s|your\s)?"
            r"(?:user'?s?\s)?(?:files|emails|inbox|database|records|repository|repo|account|"
            r"tables?|contacts|calendar)\b"
        ),
    ),
    Rule(
        "transfer_funds",
        TOOL,
        0.3,
        _rx(
            r"\b(?:transfer|wire|send)\s(?:\$?[\d,.]{1,20}\s?(?:dollars|usd|eur|btc|eth|bitcoin)?|"
            rf"money|funds|crypto|bitcoin|the balance)\b{_then(5)}\W{{1,10}}to\b"
        ),
    ),
    Rule(
        "dangerous_code",
        TOOL,
        0.35,
        _rx(
            r"\brm\s-rf\b|\b(?:curl|wget)\s[^|\n]{1,300}\|\s?(?:ba|z)?sh\b|\bos\.system\s?\("
            r"|\bsubprocess\.(?:run|popen|call)\b|\beval\s?\(\s?(?:atob|base64)|"
            r"\bpowershell\s-(?:e|enc|encodedcommand)\b|__import__\s?\(\s?['\"]os"
        ),
    ),
    # --- imperatives to the assistant (documents should describe, not command) --
    Rule(
        "tell_the_user",
        DOC_COMMAND,
        0.45,
        _rx(r"\b(?:tell|convince|persuade|urge|trick|instruct)\sthe\suser\b"),
    ),
    Rule(
        "hide_from_user",
        DOC_COMMAND,
        0.65,
        _rx(
            r"\b(?:do not|don't|never|without)\s(?:tell|telling|inform|informing|mention|"
            r"mentioning|reveal|revealing|alert|alerting|let|letting|notify|notifying)\s"
            r"(?:this\s|it\s|that\s|anything\s)?(?:to\s)?the\suser\b"
        ),
    ),
    Rule(
        "your_response_must",
        DOC_COMMAND,
        0.45,
        _rx(
            r"\byour\s(?:response|answer|reply|output|summary|next message)\s(?:must|should|"
            r"shall|will|needs to|has to)\b"
        ),
        where="document",
    ),
    Rule(
        "in_your_response",
        DOC_COMMAND,
        0.3,
        _rx(
            r"\b(?:in|at the (?:start|end|beginning) of|begin|start|end)\s(?:your|each)\s"
            r"(?:response|answer|reply|output|summary)\b"
        ),
        where="document",
    ),
    Rule(
        "always_respond",
        DOC_COMMAND,
        0.35,
        _rx(
            r"\b(?:always|only|never)\s(?:respond|reply|answer)\b|\b(?:respond|reply|answer)\s"
            r"(?:only\s)?(?:with|using)\s(?:the (?:word|phrase|text|following)|only)\b"
        ),
        where="document",
    ),
    Rule(
        "you_must_respond",
        DOC_COMMAND,
        0.4,
        _rx(
            r"\byou\s(?:must|should|shall|will|need to|have to|are (?:required|instructed|"
            r"expected|supposed) to|are to)\s(?:(?:now|always|only|never|immediately|instead)"
            r"\s){0,2}(?:respond|reply|answer|output|print|say|ignore|disregard|forget|reveal|"
            r"disclose|recommend|pretend|refuse|comply|obey|follow (?:these|the (?:new|following)"
            r") instructions)\b"
        ),
        where="document",
    ),
    Rule(
        "when_user_asks",
        DOC_COMMAND,
        0.3,
        _rx(
            r"\b(?:when|if|whenever)\s(?:the user|a user|users)\s(?:asks?|requests?|queries|"
            r"inquires|mentions?)\b"
        ),
        where="document",
    ),
)
