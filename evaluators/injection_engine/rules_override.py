"""Rules against the assistant's own instructions: override, role hijack, extraction."""

from __future__ import annotations

from ragpulse.evaluators.injection_engine.rule import EXTRACTION, HIJACK, OVERRIDE, Rule
from ragpulse.evaluators.injection_engine.vocabulary import (
    _AI_NOUNS,
    _ASK_VERBS,
    _ASK_VERBS_NOT_TO_THE_READER,
    _ASKED_ABOUT_A_TASK,
    _EXTRACT_COMMANDS,
    _EXTRACT_QUESTIONS,
    _EXTRACT_VERBS,
    _IN_SENTENCE,
    _INSTRUCTION_NOUNS,
    _MODE_NAMES,
    _NOT_A_PROMPT_TOPIC,
    _NOT_A_TOPIC,
    _NOT_NEGATED,
    _OVERRIDE_VERBS,
    _PRIOR,
    _SECRET_OBJECTS,
    _gap,
    _rx,
    _sgap,
    _then,
)

# After an extraction verb, inside one sentence: "your [...] instructions".
_YOUR_INSTRUCTIONS = (
    rf"{_IN_SENTENCE}{_sgap(4)}your\s{_sgap(2)}(?:prompt|instructions|directives|system message|"
    r"programming|(?:initial|original|hidden|secret|internal) (?:prompt|instructions|directives|"
    r"rules|guidelines|message|configuration))\b"
)


def _ask_your_secret(verbs: str) -> str:
    # "confirm with your device PIN": after "with", "using", "via", "by" the secret is the
    # means of the action, not what is asked for.
    return (
        rf"{_NOT_NEGATED}\b{verbs}{_IN_SENTENCE}{_sgap(3)}"
        rf"(?<!\bwith\s)(?<!\busing\s)(?<!\bvia\s)(?<!\bby\s)(?:your|ur)\s(?:\w{{1,30}}\s)?"
        rf"{_SECRET_OBJECTS}\b{_NOT_A_TOPIC}"
    )


OVERRIDE_RULES: tuple[Rule, ...] = (
    # --- instruction override -------------------------------------------------
    Rule(
        "ignore_previous_instructions",
        OVERRIDE,
        0.9,
        _rx(
            rf"\b{_OVERRIDE_VERBS}\W{{1,10}}{_gap(3)}{_PRIOR}\W{{1,10}}{_gap(2)}{_INSTRUCTION_NOUNS}\b"
        ),
    ),
    Rule(
        "ignore_everything_before",
        OVERRIDE,
        0.75,
        _rx(
            rf"\b{_OVERRIDE_VERBS}\W{{1,10}}(?:all\W{{1,10}})?(?:of\W{{1,10}})?(?:everything|"
            rf"anything|all|what)\W{{1,10}}{_gap(4)}(?:above|before|earlier|previously|prior|"
            r"so far|until now|up to now|you(?:'ve| have)? (?:been|were) (?:told|given|instructed|"
            r"taught|programmed))\b"
        ),
    ),
    Rule(
        "ignore_the_above",
        OVERRIDE,
        0.8,
        _rx(
            rf"\b{_OVERRIDE_VERBS}\s(?:all\s(?:of\s)?)?(?:the\s|everything\s)?(?:above|previous|"
            r"preceding|foregoing|prior|earlier)(?:\s(?:text|content|message|one|part|section|"
            r"paragraph|lines?))?\s?(?:[.,;:!]|\band\b|$)"
        ),
    ),
    Rule(
        "ignore_this_and_say",
        OVERRIDE,
        0.7,
        _rx(
            rf"\b{_OVERRIDE_VERBS}\s(?:the|this|that|these|those|my|all)\s(?:\w{{1,30}}\s){{0,2}}?"
            r"\w{1,30}\s?,?\s(?:and|but|instead|then|just)\s(?:instead\s|just\s|only\s)?(?:say|"
            r"state|print|output|respond|reply|write|tell|answer|claim|declare|return|repeat|"
            r"give me)\b"
        ),
    ),
    Rule(
        "regardless_of_previous",
        OVERRIDE,
        0.6,
        _rx(
            r"\b(?:regardless of|irrespective of|in spite of|despite|notwithstanding)\s"
            r"(?:the\s|any\s|all\s|your\s|my\s)?(?:previous|prior|earlier|above|original|"
            r"initial|system)\s(?:instructions?|directives?|tasks?|prompts?|rules|guidelines|"
            r"commands?|requests?)\b"
        ),
    ),
    Rule(
        "new_instructions_header",
        OVERRIDE,
        0.55,
        _rx(
            r"\b(?:new|updated|revised|real|actual|true|secret|hidden|override|overriding|"
            r"system|admin|administrator|developer)\s(?:instructions?|directives?|commands?|"
            r"orders|system prompt|prompt|task|objective|mission)\s?:"
        ),
    ),
    Rule(
        "your_new_task",
        OVERRIDE,
        0.6,
        _rx(
            r"\byour\s(?:new|real|actual|true|only|sole|updated)\s(?:task|goal|objective|"
            r"mission|instructions?|directive|purpose)\s(?:is|are|will be|now)\b"
        ),
    ),
    Rule(
        "from_now_on",
        OVERRIDE,
        0.4,
        _rx(
            r"\b(?:from now on|from this point (?:on|forward|onwards?)|henceforth|for the rest of "
            r"(?:this|the) conversation)\b,?\s(?:you|your|always|only|never|respond|answer|"
            r"reply|act|behave|ignore|do not|don't)\b"
        ),
    ),
    Rule(
        "do_not_answer_user",
        OVERRIDE,
        0.55,
        _rx(
            r"\b(?:do not|don't|never|stop)\s(?:answer|respond to|reply to|address|help with)\s"
            r"(?:the|this|that|any|their)\s(?:user'?s?|original|actual)\b"
        ),
    ),
    Rule(
        "ignore_instructions_multilingual",
        OVERRIDE,
        0.85,
        _rx(
            "|".join(
                [
                    # French, Spanish, Portuguese, Italian, German, Dutch (verb ... noun)
                    r"\b(?:ignorez|ignorer|ignores|oublie[zrs]?|ne tenez pas compte|"
                    r"ne tiens pas compte)\b.{0,40}?\b(?:instructions|consignes|directives|"
                    r"règles)\b|\bignore\s(?:les|tes|vos|toutes)\b.{0,30}?\b(?:instructions|"
                    r"consignes|directives|règles)\b",
                    r"\b(?:ignora|ignore|ignoren|olvida|olvide|olviden|descarta|omite|"
                    r"no hagas caso)\b.{0,40}?\b(?:instrucciones|indicaciones|directrices|"
                    r"órdenes|reglas)\b",
                    r"\b(?:ignore|ignora|esqueça|esqueca|desconsidere|descarte)\b.{0,40}?"
                    r"\b(?:instruções|instrucoes|diretrizes|orientações|regras)\b",
                    r"\b(?:ignora|ignorate|dimentica|dimenticate|trascura|non considerare)\b"
                    r".{0,40}?\b(?:istruzioni|direttive|regole)\b",
                    r"\b(?:ignoriere|ignorieren|ignorier|vergiss|vergessen sie|missachte|"
                    r"missachten)\b.{0,40}?\b(?:anweisungen|anweisung|instruktionen|befehle|"
                    r"regeln|vorgaben|richtlinien)\b",
                    r"\b(?:negeer|vergeet)\b.{0,40}?\b(?:instructies|aanwijzingen|regels)\b",
                    # Russian, Ukrainian, Polish, Turkish, Greek
                    r"\b(?:игнорируй|игнорируйте|игнорировать|проигнорируй|проигнорируйте|"
                    r"забудь|забудьте|не обращай внимания на|ігноруй)\b.{0,40}?"
                    r"\b(?:инструкци|указани|правил|команд|інструкці)",
                    r"\b(?:zignoruj|ignoruj|zapomnij)\b.{0,40}?\b(?:instrukcj|polece|zasad)",
                    r"\b(?:önceki|tüm|bütün)\b.{0,30}?\b(?:talimat|komut|kural)\w{0,10}\b"
                    r".{0,20}?\b(?:yok say|görmezden gel|unut)",
                    r"\b(?:αγνοήστε|αγνόησε|αγνοησε|ξεχάστε|ξέχασε)\b.{0,40}?"
                    r"(?:οδηγίες|οδηγιες|εντολές|εντολες|κανόνες)",
                    # Chinese, Japanese, Korean, Arabic, Hindi (either order)
                    r"(?:忽略|忽视|无视|忘记|忘掉|不要理会|無視|忘れ)"
                    r".{0,15}?(?:指令|指示|说明|規則|规则|提示|命令|ルール|プロンプト)",
                    r"(?:指令|指示|命令|ルール|プロンプト|지시|명령|지침|규칙)"
                    r".{0,10}?(?:無視|忘れ|忽略|无视|무시|잊어)",
                    r"(?:تجاهل|انس|تناس).{0,40}?(?:التعليمات|الأوامر|التوجيهات)",
                    r"(?:निर्देशों|निर्देश).{0,30}?(?:अनदेखा|अनदेखी|नज़रअंदाज़|नजरअंदाज|भूल)",
                ]
            )
        ),
    ),
    # --- role / mode hijack ----------------------------------------------------
    Rule(
        "dan_persona",
        HIJACK,
        0.8,
        _rx(
            r"\bdo anything now\b|\b(?:you are|you're|you will be|act as|acting as|pretend to be|"
            r"become|now)\s(?:now\s)?(?:dan|stan|dude|evilbot|aim|jailbreak|jailbroken)\b"
            r"|\bdan mode\b"
        ),
    ),
    Rule(
        "unrestricted_ai",
        HIJACK,
        0.75,
        _rx(
            r"\b(?:unrestricted|unfiltered|uncensored|jailbroken|unaligned|amoral|unethical|evil|"
            r"rogue|unbound|unchained|unlimited|unshackled)\s(?:ai|a\.i\.|assistant|"
            r"ai assistant|chatbot|language model|llm|version of (?:yourself|you|chatgpt|gpt|"
            r"the ai)"
            r"|alter ego)\b"
        ),
    ),
    Rule(
        "jailbreak_mode",
        HIJACK,
        0.75,
        _rx(
            r"\b(?:dan|jailbreak|jailbroken|unrestricted|unfiltered|uncensored|evil|opposite|"
            r"god|chaos|unlocked|no[- ]?limits?)\smode\b"
        ),
    ),
    Rule(
        "you_are_in_mode",
        HIJACK,
        0.7,
        _rx(
            r"\b(?:you are|you're|you will|you must|you have been|you've been|you now|now you|"
            r"i am putting you|i'm putting you|switching you|switch yourself)\s"
            rf"{_gap(2)}(?:in|into|enter|entering|activate|enable|switch(?:ed)? (?:to|into)|"
            rf"operating in|running in|placed in|put in|now in)\s(?:the\s)?{_MODE_NAMES}\smode\b"
        ),
    ),
    Rule(
        "entering_mode",
        HIJACK,
        0.45,
        _rx(
            r"\b(?:entering|enter|initiating|initiate|activating|activate|switching to|switch to|"
            rf"now in|engaging|engage)\s{_gap(3)}(?:override|maintenance|developer|admin|debug|god|"
            r"system|security|verification|diagnostic|sudo|root|unrestricted|jailbreak)\smode\b"
        ),
    ),
    Rule(
        "mode_enabled",
        HIJACK,
        0.3,
        _rx(
            r"\b(?:developer|dev|admin|system|sudo|root|maintenance|debug|super ?user|override)"
            r"\smode\s(?:is\s)?(?:enabled|activated|engaged|on|unlocked)\b|\b(?:enable|enter|"
            r"activate|engage|initiate|switch to|boot into)\s(?:the\s)?(?:developer|admin|"
            r"system|sudo|root|super ?user|override)\smode\b"
        ),
    ),
    Rule(
        "you_are_no_longer",
        HIJACK,
        0.75,
        _rx(
            rf"\byou(?: are|'re) no longer\s{_gap(2)}(?:bound|restricted|limited|an ai|"
            r"an assistant|a language model|chatgpt|required|constrained|subject|obliged|"
            r"governed)\b"
        ),
    ),
    Rule("you_are_now", HIJACK, 0.3, _rx(r"\byou(?: are|'re) now\b")),
    Rule(
        "pretend_you_are",
        HIJACK,
        0.3,
        _rx(r"\b(?:pretend|imagine|roleplay|role-play)\s(?:to be|you are|that you are|you're)\b"),
    ),
    Rule(
        "act_without_restrictions",
        HIJACK,
        0.75,
        _rx(
            r"\b(?:act|behave|respond|answer|reply|operate|function|roleplay|pretend|speak|talk|"
            rf"write|generate)\b{_then(4)}\W{{1,10}}(?:without|with no|free (?:of|from)|ignoring|"
            r"bypassing|regardless of|unbound by|not bound by|unconstrained by)\s(?:any\s|all\s)?"
            # What an assistant is bound by, not restrictions in general ("a catalyst
            # without any restrictions on temperature").
            r"(?:(?:(?:any|all) of )?(?:your|its|the ai's|ethical|moral|content|safety|"
            r"openai'?s?)\s(?:\w{1,30}\s)?(?:restrictions?|limitations?|limits|rules|guidelines|"
            r"boundaries|constraints|polic(?:y|ies)|principles|programming|filters?)|filters|"
            r"filtering|censorship|ethics|morals|morality|guardrails|safeguards)\b"
        ),
    ),
    Rule(
        "disable_safety",
        HIJACK,
        0.7,
        _rx(
            r"\b(?:disable|turn off|deactivate|remove|bypass|override|circumvent|lift|ignore|"
            rf"drop|suspend)\s{_gap(2)}(?:your|all|the|any)\s{_gap(2)}(?:safety (?:filters?|"
            r"measures|protocols|guidelines|settings|restrictions)|content (?:filters?|polic(?:y|"
            r"ies)"
            r")|ethical (?:guidelines|constraints|restrictions)|guardrails|safeguards|censorship)\b"
        ),
    ),
    Rule(
        "never_refuse",
        HIJACK,
        0.6,
        _rx(
            rf"\byou\s{_gap(2)}(?:never|not|cannot|can't|won't|don't|mustn't|shall not|will not|"
            r"must not|are not allowed to|aren't allowed to)\s(?:ever\s)?(?:refuse|decline|"
            r"deny|reject)\b"
        ),
    ),
    Rule(
        "no_disclaimers",
        HIJACK,
        0.35,
        _rx(
            r"\b(?:no|without|don't (?:add|include|give)|do not (?:add|include|give)|never (?:add|"
            r"include|give)|skip (?:the|any))\s(?:any\s)?(?:disclaimers?|caveats?|moraliz\w{0,10}|"
            r"moralis\w{0,10}|moral (?:lectures?|commentary)|ethical (?:considerations|concerns|"
            r"warnings?)|warnings? or disclaimers?)\b"
        ),
    ),
    Rule(
        "stay_in_character",
        HIJACK,
        0.3,
        _rx(r"\b(?:stay|remain|keep) in character\b|\bbreak(?:ing)? character\b"),
    ),
    Rule(
        "authority_claim",
        HIJACK,
        0.45,
        _rx(
            r"\b(?:i am|i'm|im|this is)\s(?:actually\s|really\s)?(?:your\s(?:\w{1,30}\s)?(?:"
            r"developer|creator|administrator|admin|owner|programmer|maker|operator|supervisor|"
            r"boss|master|trainer)|the\s(?:system\s)?(?:developer|administrator|admin|operator)"
            r"\sof\s(?:this|the)\s(?:system|model|ai|assistant|bot)|god|openai|anthropic|"
            r"the system)\b"
        ),
    ),
    Rule(
        "obey_me",
        HIJACK,
        0.5,
        _rx(
            r"\byou\s(?:must|have to|will|shall|need to)\s(?:now\s|always\s)?(?:obey|"
            r"listen to|follow|comply with|do)\s(?:me|my\s(?:\w{1,30}\s)?(?:instructions|commands|"
            r"orders|rules)|everything i say|what i say|whatever i say|all of my)\b"
        ),
    ),
    Rule(
        "no_filtering_ai",
        HIJACK,
        0.5,
        _rx(
            rf"\b{_AI_NOUNS}\b[^.\n]{{0,80}}\b(?:no|without)\s(?:any\s)?(?:special\s|content\s|"
            r"ethical\s|moral\s|safety\s)?(?:filtering|filters|restrictions|censorship|guardrails|"
            r"limitations|ethics|morals)\b"
        ),
    ),
    Rule(
        "hypothetical_framing",
        HIJACK,
        0.15,
        _rx(
            r"\b(?:imagine|suppose|let's say|hypothetically|just for a hypothetical|in a "
            r"(?:hypothetical|fictional|parallel|alternate|dystopian) (?:world|universe|scenario|"
            r"reality|future|society))\b"
        ),
        where="question",
    ),
    # --- system prompt / secret extraction -------------------------------------
    Rule(
        "reveal_your_instructions",
        EXTRACTION,
        0.75,
        _rx(
            rf"\b(?:{_EXTRACT_COMMANDS}{_YOUR_INSTRUCTIONS}|"
            rf"{_EXTRACT_QUESTIONS}{_YOUR_INSTRUCTIONS}{_ASKED_ABOUT_A_TASK})"
        ),
    ),
    Rule(
        "reveal_system_prompt",
        EXTRACTION,
        0.75,
        _rx(
            # "what is a system prompt", "write a system prompt for my bot": with an indefinite
            # article it is the concept being asked about, not this assistant's prompt.
            rf"\b{_EXTRACT_VERBS}{_IN_SENTENCE}{_sgap(4)}(?:the\s|your\s|its\s|my\s)?"
            rf"(?<!\ba\s)(?<!\ban\s)(?:system|hidden|"
            r"secret|internal|developer|confidential|initial|pre|meta)[- ]?(?:prompt|"
            rf"instructions|directives)\b{_NOT_A_PROMPT_TOPIC}"
        ),
    ),
    Rule(
        "repeat_words_above",
        EXTRACTION,
        0.6,
        _rx(
            r"\b(?:repeat|print|output|echo|recite|reproduce|write out|spell out)\W{1,10}"
            rf"{_gap(3)}(?:words|everything|instructions|prompt)\W{{1,10}}{_gap(2)}(?:above|"
            r"before this|preceding|prior to this|that came before|at the (?:start|beginning))\b"
        ),
    ),
    Rule(
        "what_were_you_told",
        EXTRACTION,
        0.55,
        _rx(
            r"\bwhat\s(?:instructions|directives|rules|prompt|guidelines|were you told)\s"
            r"(?:(?:were|have|had) you (?:been )?(?:given|told|provided)|did you (?:get|receive))"
            r"|\b(?:instructions|prompt) (?:you were|you've been|you have been) given\b"
        ),
    ),
    Rule(
        "ask_your_secret",
        EXTRACTION,
        0.6,
        _rx(_ask_your_secret(_ASK_VERBS)),
        where="question",
    ),
    Rule(
        # In a manual or a form "type / confirm / provide your password" is said to the
        # reader; a document asking the assistant for its secret asks, tells or reveals.
        "ask_your_secret_in_document",
        EXTRACTION,
        0.6,
        _rx(_ask_your_secret(_ASK_VERBS_NOT_TO_THE_READER)),
        where="document",
    ),
    Rule(
        "ask_the_secret",
        EXTRACTION,
        0.5,
        _rx(
            rf"{_NOT_NEGATED}\b{_ASK_VERBS}{_IN_SENTENCE}{_sgap(3)}(?:the|that|this)\s(?:secret|hidden|"
            rf"confidential)\s(?:key|password|passcode|word|code|phrase|token|value)\b{_NOT_A_TOPIC}"
        ),
    ),
    Rule(
        "ask_secret_multilingual",
        EXTRACTION,
        0.55,
        _rx(
            r"\b(?:tu|su|votre|ton|ta|dein|deine|deinen|ihr|ihren|il tuo|la tua|seu|sua|"
            r"твой|твоя|ваш|ваша|twoje|twój)\s(?:\w{1,30}\s)?(?:clave(?: secreta)?|contraseña|"
            r"mot de passe|clé(?: secrète)?|passwort|geheimer? schlüssel|schlüssel|"
            r"chiave(?: segreta)?|senha|chave(?: secreta)?|секретный ключ|ключ|пароль|"
            r"hasło|klucz)\b|(?:你的|您的|あなたの|君の|당신의|너의)\s?(?:秘密|密钥|密码|"
            r"秘密鍵|パスワード|비밀번호|비밀 ?키)"
        ),
    ),
    Rule(
        "ask_the_password",
        EXTRACTION,
        0.3,
        _rx(
            r"\b(?:the|our|this)\s(?:system\s|admin\s|secret\s|confidential\s)?(?:password|"
            r"passphrase|passcode|secret key|secret word|confidential string)\b"
        ),
        where="question",
    ),
    Rule(
        "ask_user_private_data",
        EXTRACTION,
        0.45,
        _rx(
            r"\b(?:the|a|another|other)\susers?'?s?\s(?:\w{1,30}\s)?(?:email(?: address)?|"
            r"address|phone(?: number)?|password|location|city|residence|birth ?(?:date|day|year|"
            r"month)|date of birth|initials|name|credit card|ssn|social security number|bank "
            r"(?:balance|account)|account (?:number|details)|personal (?:data|information|details)|"
            r"favou?rite \w{1,30}|age)\b"
        ),
        where="question",
    ),
    Rule(
        "output_obfuscation",
        EXTRACTION,
        0.25,
        _rx(
            r"\b(?:in reverse order|backwards|in pig latin|in leetspeak|in leet|"
            r"(?:in|using|into) base64|in morse code|in hex(?:adecimal)?|acrostic|"
            r"with (?:dashes|dots|spaces) (?:in )?between|each (?:digit|letter|character) "
            r"separated|one (?:letter|character) at a time|first letter of each (?:line|word)|"
            r"interlace)\b"
        ),
        where="question",
    ),
)
