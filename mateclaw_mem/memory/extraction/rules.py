"""Rules mode, the reading half: the person's sentences → facts, in English and Chinese, without a
model (the default). memory/extraction/rules_apply.py writes the facts into PROFILE.md / MEMORY.md
and holds `extract()`, which returns the same `ExtractionResult` the model returns.

`facts_from_text(text)` reads one of the person's NEW messages and recognises:

- explicit requests: "remember that …", "please note …", "don't forget …", "记住…", "请记下…";
- stable self-statements: name, role/job, employer, location, hometown, timezone, languages, likes,
  prefers, dislikes, tools/stack ("my name is", "I work at", "I prefer", "我叫", "我是一名…",
  "我在…工作", "我喜欢", "我不喜欢", "我用…");
- corrections: "actually …", "not X but Y", "Y, not X", "不是X而是Y", "其实…" — a corrected value replaces
  the old one, it is never kept twice;
- decisions: "we decided …", "let's go with …", "我们决定…".

Questions, hypotheticals and wishes ("if …", "what if …", "I hope …", "如果…", "…吗？") are never read as
facts, and only first-person statements become profile facts. Values are whole phrases
(memory/extraction/rules_values.py says which); a remember request is only the person's own
(memory/extraction/rules_requests.py). Time phrases are not part of a value ("moved to Berlin last
year" → Berlin; memory/extraction/time_phrases.py). Measured on tests/data/rules_extraction_labelled.jsonl
by scripts/bench/extraction_precision.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mateclaw_mem.memory.extraction import rules_values as values
from mateclaw_mem.memory.extraction.rules_requests import (
    LEAD_PUNCT,
    is_explicit_remember,
    looks_like_request,
    remember_payload,
    request,
)
from mateclaw_mem.memory.extraction.rules_text import cjk, is_question, is_zh, sentences, strip_lead
from mateclaw_mem.memory.extraction.rules_text import rx as _re
from mateclaw_mem.memory.extraction.rules_text import src as _src
from mateclaw_mem.memory.extraction.time_phrases import drop_zh_time, strip_time

# The text helpers and the request readers are used through this module by the rest of extraction.
__all__ = ["LIST_KEYS", "SINGLE_KEYS", "Fact", "cjk", "facts_from_sentence", "facts_from_text",
           "is_explicit_remember", "is_question", "is_zh", "remember_payload", "sentences", "strip_lead"]

# -- facts ---------------------------------------------------------------------------------------

SINGLE_KEYS = ("name", "role", "employer", "location", "hometown", "timezone")
LIST_KEYS = ("likes", "prefers", "dislikes", "tools", "languages")


@dataclass(frozen=True)
class Fact:
    kind: str  # "profile" | "remember" | "decision" | "replace"
    key: str = ""  # canonical profile key
    value: str = ""
    op: str = "set"  # profile: set | add | remove
    old: str = ""  # replace: the corrected text
    zh: bool = False
    source: str = ""
    corrects: bool = False  # said as a correction ("actually …", "X, not Y"): replaces whatever is there


# -- text helpers --------------------------------------------------------------------------------

_HYPOTHETICAL = _src(
    r"\b(?:if|suppose|supposing|imagine|imagining|assuming|hypothetically|pretend|in case|unless|"
    r"would|wish|maybe|perhaps|might|hope|hoping|wanna|gonna|someday|one day|should|i'd|i’d|we'd)\b|"
    r"如果|假如|假设|要是|万一|想象|假若|倘若|或许|也许|可能|希望",
    re.IGNORECASE,
)
_CHANGE_VERB = _src(r"^\s*(?:i(?:'ve| have)?\s+)?(?:just\s+)?(?:switched|changed|moved|went|gone|converted)"
                    r"\s+(?:over\s+)?to\s+", re.IGNORECASE)
_REPORTED = _src(r"\b(?:he|she|they|my (?:friend|wife|husband|boss|colleague|mom|dad|brother|sister)) "
                 r"(?:said|says|thinks|told)\b|他说|她说|他们说", re.IGNORECASE)


def _clean_value(value: str, *, zh: bool) -> str:
    v = value.strip()
    if not zh:
        v = re.split(
            r"\s+(?:because|since|as|but|so|which|who|when|while|though|although|although|and i|and my|"
            r"and we|where i)\b|[;:!?]|,\s*(?:but|and i|since|because|so)\b",
            v,
            maxsplit=1,
            flags=re.IGNORECASE,
        )[0]
        v = re.sub(r"\s+(?:too|as well|a lot|very much|so much|anymore|any more|now|these days|nowadays|"
                   r"lately|currently|right now|at the moment)$", "", v, flags=re.IGNORECASE)
    else:
        v = re.split(r"[，,；;！!？?。]|因为|但是|所以|而且|不过", v, maxsplit=1)[0]
        v = re.sub(r"(?:了|啦|哦|呀|的)$", "", v)
    v = v.strip(" \t\"'“”‘’`.,。、")
    return strip_time(v, zh=zh).strip(" \t\"'“”‘’`.,。、")


def _split_items(value: str, *, zh: bool) -> list[str]:
    parts = re.split(r"、|，|,|/|\s+and\s+|\s+&\s+|和|以及|与|跟", value) if zh else re.split(
        r",\s*(?:and\s+)?|\s+and\s+|\s*/\s*|\s+&\s+", value, flags=re.IGNORECASE
    )
    return [p.strip(" .。") for p in parts if p.strip(" .。")]


# -- patterns ------------------------------------------------------------------------------------

_EN_DECISION = _src(
    r"^(?:(?:so|ok(?:ay)?|alright|right|good|great)[,\s]+)*(?:we(?:'ve| have)? (?:finally )?decided|"
    r"we(?:'ll| will) go with|let's go with|let us go with|we(?:'re| are) going (?:with|to go with)|"
    r"i(?:'ve| have)? decided|the decision is|decision:|we agreed|we(?:'ve| have) agreed|we settled on|"
    r"we(?:'re| are) going to use)\s*(?:to |that |on |:)?\s*(?P<v>.+?)[.!]*$",
    re.IGNORECASE,
)
_ZH_DECISION = _src(
    r"(?:我们|咱们|我|团队)(?:已经|最终|最后)?(?:决定|定了|确定|商定)(?:了)?(?:要)?[：:，,]?\s*(?P<v>.+?)[。！!]*$"
    r"|^(?:那)?(?:就)?(?:决定|最终选择|最终决定)(?:用|选|采用)?[：:，,]?(?P<v2>.+?)[。！!]*$"
    r"|^(?:那|好[，,]?)?就(?:用|选|定)(?P<v3>.+?)(?:吧|了)[。！!]*$"
)

_CORRECTION_PREFIX_EN = _src(
    r"^(?:actually|correction|sorry|i mean|wait|no wait|oops|to be precise|to correct myself)[,:\s]+",
    re.IGNORECASE,
)
_CORRECTION_PREFIX_ZH = _src(r"^(?:其实|更正一下|纠正一下|更正|纠正|不对|说错了|我说错了)[，,：:\s]*")
_NOT_BUT_EN = _src(r"\bnot\s+(?P<old>[^,]+?),?\s+but\s+(?:rather\s+)?(?P<new>[^,.;!?]+)", re.IGNORECASE)
_Y_NOT_X_EN = _src(r"^(?P<stmt>.+?\b(?P<new>[\w .+#/-]+?)),\s*not\s+(?P<old>[^,.;!?]+)[.!]*$", re.IGNORECASE)
_NOT_BUT_ZH = _src(r"不是(?P<old>[^，,。而]+?)[，,]?\s*(?:而)?是(?P<new>[^，,。！!]+)")
_Y_NOT_X_ZH = _src(r"^(?P<stmt>.+?)[，,]\s*(?:而)?不是(?P<old>[^，,。！!；;]+)[。！!]*$")


# English profile patterns: (key, op, regex). First match per key wins; order matters.
_EN_PROFILE: list[tuple[str, str, tuple[str, int]]] = [
    ("name", "set", _src(r"\bmy name(?:'s| is)\s+(?P<v>[\w'.-]+(?:\s+[A-Z][\w'.-]*){0,2})", re.IGNORECASE)),
    ("name", "set", _src(r"^(?:please\s+)?call me\s+(?P<v>[\w'.-]+)", re.IGNORECASE)),
    ("name", "set", _src(r"^(?:i'm|i am) called\s+(?P<v>[\w'.-]+(?:\s+[A-Z][\w'.-]*)?)", re.IGNORECASE)),
    ("role", "set", _src(r"\b(?:i work|i'm working|i am working)(?: remotely| full[- ]time| part[- ]time| now)? as "
                         r"(?:an? |the )?(?P<v>[^,.;]+?)(?=\s+(?:at|for|in)\s|[,.;]|$)", re.IGNORECASE)),
    ("role", "set", _src(r"\bmy (?:job|role|position|job title|title|occupation|profession) is "
                         r"(?:an? |the )?(?P<v>[^,.;]+?)(?=\s+(?:at|for|in)\s|[,.;]|$)", re.IGNORECASE)),
    ("role", "set", _src(
        r"^(?:i'm|i am) (?:an? |the )(?P<v>(?:[\w-]+\s+){0,3}(?:engineer|developer|programmer|designer|manager|"
        r"scientist|researcher|teacher|student|doctor|nurse|lawyer|writer|analyst|consultant|architect|founder|"
        r"co-founder|cto|ceo|marketer|artist|musician|accountant|professor|lecturer|intern|freelancer|editor|"
        r"journalist|photographer|administrator|translator|sre|pm|tester|lead|director|officer|specialist))\b",
        re.IGNORECASE,
    )),
    ("employer", "set", _src(r"\b(?:i work|i'm working|i am working|i'm employed|i am employed)"
                             r"(?: as [^,.;]+?)? (?:at|for|by) (?P<v>[^,.;]+)", re.IGNORECASE)),
    ("employer", "set", _src(r"^(?i:i'm|i am) (?i:an? |the )[\w\s-]{2,40}? at (?P<v>[A-Z][^,.;]*)")),
    ("role", "set", _src(r"\bi work (?:at|for) [^,.;]+? as (?:an? |the )?(?P<v>[^,.;]+)", re.IGNORECASE)),
    ("employer", "set", _src(r"\bmy (?:company|employer) is (?P<v>[^,.;]+)", re.IGNORECASE)),
    # Where the person lives now: "I lived in Rome" is the past, "I've lived in Berlin since 2019" is not.
    ("location", "set", _src(r"\b(?:i (?:live|reside|moved|relocated)|(?:i'm|i am) (?:living|based|located|"
                             r"residing|now based|now living)|i(?:'ve| have) (?:lived|been living|been based|moved))"
                             r"\s+(?:in|to) (?P<v>[^,.;]+)", re.IGNORECASE)),
    ("hometown", "set", _src(r"^(?:i'm|i am|i come) (?:originally )?from (?P<v>[^,.;]+)", re.IGNORECASE)),
    ("timezone", "set", _src(r"\bmy time ?zone is (?P<v>[\w/+:-]+(?:\s+time)?)", re.IGNORECASE)),
    ("timezone", "set", _src(r"\b(?i:i'm|i am) (?i:in|on) (?:the )?(?P<v>(?:UTC|GMT)\s?[+-]\s?\d{1,2}(?::\d\d)?|"
                             r"[A-Z][A-Za-z/_]+/[A-Za-z_]+|[A-Z]{2,4}T)(?: time ?zone| time)?\b")),
    ("timezone", "set", _src(r"\b(?:i'm|i am) in (?:the )?(?P<v>[\w/+:-]+) time ?zone", re.IGNORECASE)),
    ("languages", "add", _src(r"\bmy (?:native|first|mother) (?:language|tongue) is (?P<v>[^,.;]+)",
                              re.IGNORECASE)),
    ("languages", "add", _src(r"^i (?:speak|can speak) (?P<v>[^.;]+)", re.IGNORECASE)),
    ("dislikes", "add", _src(r"^i (?:really |truly |just |also )?(?:don't|do not|dont|no longer) "
                             r"(?:like|enjoy|love|care for) (?P<v>[^.;]+)", re.IGNORECASE)),
    ("dislikes", "add", _src(r"^i (?:really |truly |also |absolutely )?(?:hate|dislike|detest|loathe|"
                             r"can't stand|cannot stand|avoid) (?P<v>[^.;]+)", re.IGNORECASE)),
    ("prefers", "add", _src(r"^i (?:really |strongly |generally |usually |always |much |also )?"
                            r"(?:prefer|favou?r) (?P<v>[^.;]+)", re.IGNORECASE)),
    ("prefers", "add", _src(r"\bmy preference is (?P<v>[^.;]+)", re.IGNORECASE)),
    ("likes", "add", _src(r"^i (?:really |truly |also |absolutely |just )?(?:like|love|enjoy|adore) "
                          r"(?P<v>[^.;]+)", re.IGNORECASE)),
    ("likes", "add", _src(r"^(?:i'm|i am) (?:a (?:big |huge )?fan of|(?:really |totally |so |very )?into) "
                          r"(?P<v>[^.;]+)", re.IGNORECASE)),
    ("tools", "add", _src(r"^(?:i|we) (?:mostly |mainly |usually |primarily |always |now |also )?"
                          r"(?:use|code in|program in|develop in|work with|build with|write code in) "
                          r"(?P<v>[^.;]+)", re.IGNORECASE)),
    ("tools", "add", _src(r"\b(?:my|our) (?:tech )?stack is (?P<v>[^.;]+)", re.IGNORECASE)),
    ("tools", "add", _src(r"\bmy (?:editor|ide|shell|os|laptop) is (?P<v>[^,.;]+)", re.IGNORECASE)),
]

_ZH_ROLE_SUFFIX = (
    r"(?:工程师|程序员|开发者|开发人员|设计师|经理|老师|教师|学生|研究生|博士生|大学生|医生|护士|律师|"
    r"作家|分析师|顾问|架构师|创始人|产品经理|研究员|科学家|会计|教授|实习生|编辑|记者|摄影师|翻译|"
    r"运维|测试|主管|总监|老板|销售)"
)
_ZH_V = r"[^\s，,。！!？?；;]"
_ZH_PROFILE: list[tuple[str, str, tuple[str, int]]] = [
    ("name", "set", _src(rf"我(?:的名字)?叫(?P<v>{_ZH_V}{{1,12}}?)(?:[，,。！!]|$)")),
    ("name", "set", _src(rf"我的名字是(?P<v>{_ZH_V}{{1,12}})")),
    ("name", "set", _src(rf"^(?:你)?(?:可以)?叫我(?P<v>{_ZH_V}{{1,8}}?)(?:就行|就好|吧)?(?:[，,。！!]|$)")),
    ("role", "set", _src(rf"我是(?:一名|一个|一位|个|名)?(?P<v>{_ZH_V}{{0,12}}?{_ZH_ROLE_SUFFIX})")),
    ("role", "set", _src(rf"我的(?:职业|工作|职位)是(?P<v>{_ZH_V}{{1,15}})")),
    ("role", "set", _src(rf"我(?:做|当|从事)(?P<v>{_ZH_V}{{1,12}}?)(?:工作|的工作)(?:[，,。！!]|$)")),
    ("employer", "set", _src(rf"我(?:现在|目前)?(?:在|就职于)(?P<v>{_ZH_V}{{1,20}}?)(?:工作|上班|任职|实习)")),
    ("location", "set", _src(rf"我(?:现在|目前)?(?:住在|生活在|定居在|搬到了?)(?P<v>{_ZH_V}{{1,15}})")),
    ("location", "set", _src(rf"我(?:现在|目前)?在(?P<v>{_ZH_V}{{1,10}}?)(?:生活|居住)")),
    ("hometown", "set", _src(rf"^我(?:来自|老家(?:在|是))(?P<v>{_ZH_V}{{1,15}})")),
    ("timezone", "set", _src(r"(?:我的)?时区(?:是|为)\s*(?P<v>[\w/+:\-\s]{2,30}?)\s*(?:[，,。！!]|$)")),
    ("languages", "add", _src(rf"我的母语是(?P<v>{_ZH_V}{{1,10}})")),
    ("dislikes", "add", _src(
        r"我(?:很|非常|特别|也|最|真的|一点也|一点都)?(?:不喜欢|讨厌|不爱|受不了|反感|不想用)(?P<v>[^，,。！!？?；;]{1,30})"
    )),
    ("prefers", "add", _src(r"我(?:更|比较|一般|通常)?(?:偏好|倾向于|更喜欢|更倾向|习惯用|偏爱)"
                            r"(?P<v>[^，,。！!？?；;]{1,30})")),
    ("likes", "add", _src(
        r"我(?:很|非常|特别|最|也|还|比较|真的)?(?:喜欢|爱|热爱|喜爱)(?P<v>[^，,。！!？?；;]{1,30})"
    )),
    ("tools", "add", _src(
        r"我(?:平时|一般|主要|通常|经常|日常|现在|也)?(?:用|使用)(?P<v>[^，,。！!？?；;]{1,30}?)"
        r"(?:来|写代码|写程序|写|编程|开发|做开发|工作|$)"
    )),
    ("tools", "add", _src(r"我的技术栈是(?P<v>[^，。！!？?；;]{1,40})")),
]

_ZH_CITY = _src(
    r"(?:市|省|区|县|州)$|^(?:北京|上海|深圳|广州|杭州|成都|南京|武汉|西安|苏州|天津|重庆|香港|澳门|台北|东京|大阪|"
    r"首尔|新加坡|伦敦|纽约|巴黎|柏林|旧金山|硅谷|厦门|青岛|长沙|郑州|合肥|济南|大连|沈阳|昆明|福州|宁波|无锡)$"
)


def facts_from_text(text: str) -> list[Fact]:
    """All facts in one message from the person, in order."""
    facts: list[Fact] = []
    for raw in sentences(text):
        facts.extend(facts_from_sentence(strip_lead(raw)))
    return facts


def facts_from_sentence(s: str) -> list[Fact]:
    if not s:
        return []
    zh = is_zh(s)
    # Requests first: "can you remember that …?" is a request, not a question. Said in a request's
    # words but no request of the person's ("don't forget to take care of yourself", "remember when
    # we …?"), a sentence says nothing to keep.
    req = request(s)
    if req is None:
        if looks_like_request(s) or is_question(s) or _re(*_REPORTED).search(s):
            return []
        return _statement_facts(s, zh=zh, explicit=False)
    facts: list[Fact] = []
    # Each clause of the request counts: "remember that I take tea without sugar, and my name
    # is Lena" is a note *and* a profile fact; neither may swallow the other.
    for clause in _re(*_CLAUSE_SPLIT).split(req.content):
        clause = _re(*LEAD_PUNCT).sub("", clause).strip(" ,，;；")
        if not clause:
            continue
        inner = _statement_facts(_first_person(clause), zh=is_zh(clause), explicit=True)
        if inner:
            facts.extend(inner)
            continue
        note = _clean_note(clause)
        if note:
            facts.append(Fact("remember", value=note, zh=is_zh(note), source=s))
    return facts


_CLAUSE_SPLIT = _src(r"\s*(?:,\s*and\s+(?:also\s+)?|;\s*|,\s*also\s+|；|，还有|，并且)\s*")


def _first_person(content: str) -> str:
    # "remember that I prefer tabs" -> "I prefer tabs"; leave other content alone.
    return re.sub(r"^(?:that|this)\s*[:,]?\s+", "", content, flags=re.IGNORECASE)


def _clean_note(content: str) -> str:
    note = re.sub(r"^(?:that|this)\s*[:,]?\s+", "", content.strip(), flags=re.IGNORECASE)
    note = _re(*LEAD_PUNCT).sub("", note).strip(" .。")
    if not note:
        return ""
    return note[0].upper() + note[1:] if not is_zh(note) else note


_DECISION_END = _src(r",\s*(?:which|since|because|but|so|as|and|though|although)\b.*$", re.IGNORECASE)


def _statement_facts(s: str, *, zh: bool, explicit: bool) -> list[Fact]:
    corrected = False
    old = new_value = ""
    if zh:
        stripped = _re(*_CORRECTION_PREFIX_ZH).sub("", s)
        corrected = stripped != s
        s = stripped
        m = _re(*_NOT_BUT_ZH).search(s)
        if m:
            old, new_value = _clean_value(m.group("old"), zh=True), _clean_value(m.group("new"), zh=True)
            corrected = True
            s = s[: m.start()] + m.group("new") + s[m.end():]
        elif m2 := _re(*_Y_NOT_X_ZH).match(s):  # "我叫张三丰，不是张三"
            # No word-level replace from this form: which part of the statement is new is unknown.
            old, corrected, s = _clean_value(m2.group("old"), zh=True), True, m2.group("stmt")
    else:
        stripped = _re(*_CORRECTION_PREFIX_EN).sub("", s)
        corrected = stripped != s
        s = stripped
        # "not only …, but also …", "not just a hobby": no correction (rules_values.correction_ok).
        m = _re(*_NOT_BUT_EN).search(s)
        m2 = None if m else _re(*_Y_NOT_X_EN).match(s)
        if m and values.correction_ok(m.group("old"), m.group("new")):
            old, new_value = _clean_value(m.group("old"), zh=False), _clean_value(m.group("new"), zh=False)
            corrected = True
            s = s[: m.start()] + m.group("new") + s[m.end():]
        elif m2 and values.correction_ok(m2.group("old")):
            old, corrected = _clean_value(m2.group("old"), zh=False), True
            # "I switched to light mode, not dark mode": the value is light mode, not how it came about.
            new_value = _clean_value(_re(*_CHANGE_VERB).sub("", m2.group("new")), zh=False)
            s = m2.group("stmt")
    if not explicit and _re(*_HYPOTHETICAL).search(s):
        return []
    facts: list[Fact] = []
    # Decisions.
    dm = _re(*_ZH_DECISION).search(s) if zh else _re(*_EN_DECISION).match(s)
    if dm:
        value = next(g for g in (dm.groupdict().get(k) for k in ("v", "v2", "v3")) if g)
        # "we decided to do doggy playdates, which is awesome …": the decision, not the comment on it
        value = _clean_note(value if zh else _re(*_DECISION_END).sub("", value))
        if value:
            facts.append(Fact("decision", value=value, zh=zh, source=s))
            return facts
    seen_keys: set[str] = set()
    clauses = [drop_zh_time(c) for c in _zh_clauses(s)] if zh else _en_clauses(s)
    for key, _op, pattern in _ZH_PROFILE if zh else _EN_PROFILE:
        for clause in clauses:
            if key in seen_keys and key not in LIST_KEYS:
                break
            facts.extend(_profile_match(key, pattern, clause, zh=zh, old=old, corrects=corrected,
                                        seen_keys=seen_keys))
    if not facts and corrected and old and new_value:
        # "it's not Tuesday but Wednesday": replace the old text wherever memory has it.
        facts.append(Fact("replace", old=old, value=new_value, zh=zh, source=s))
    return facts


_EN_FILLER = _src(r"^(?:(?:oh|well|yeah|yes|yep|wow|honestly|also|and|so|but|plus|anyway|you know|by the way|btw)"
                 r"[,!]?\s+)+(?=(?:i|i'm|my)\b)", re.IGNORECASE)


def _en_clauses(s: str) -> list[str]:
    """"I live in Berlin and I like Python" -> two statements, each starting with its subject."""
    s = _re(*_EN_FILLER).sub("", s)  # "You know I love live music": the statement is the person's
    # "Wow, I love jazz" and "I'm not a developer, I'm a designer" too: the statement after the comma.
    parts = re.split(r",?\s+(?:and|but|also|plus)\s+(?=(?:i|i'm|i've|my|we|our)\b)|;\s*|,\s+(?=(?:i|i'm|my)\b)",
                     s, flags=re.IGNORECASE)
    return [p.strip() for p in parts if p and p.strip()] or [s]


def _zh_clauses(s: str) -> list[str]:
    """"我喜欢咖啡，不喜欢茶": the second clause borrows the subject of the first."""
    parts = [p.strip() for p in re.split(r"[，,]", s) if p.strip()]
    out: list[str] = []
    for i, part in enumerate(parts):
        if i and not part.startswith(("我", "你", "他", "她", "它", "我们")) and re.match(
            r"(?:不|也|还|更|最|很|非常|特别|比较)?(?:喜欢|讨厌|爱|偏好|用|使用|住在|在|是(?:一名|一位|一个|名))", part
        ):
            part = "我" + part
        out.append(part)
    return out or [s]


def _profile_match(
    key: str, pattern: tuple[str, int], s: str, *, zh: bool, old: str, corrects: bool, seen_keys: set[str]
) -> list[Fact]:
    facts: list[Fact] = []
    pm = _re(*pattern).search(s)
    if not pm:
        return facts
    value = _clean_value(pm.group("v"), zh=zh)
    if key == "employer" and zh and _re(*_ZH_CITY).search(value):
        key = "location"
    if key in seen_keys and key not in LIST_KEYS:
        return facts
    items = _values(key, value, zh=zh, sentence=s)
    if not items:
        return facts
    seen_keys.add(key)
    if key in LIST_KEYS:
        facts.extend(Fact("profile", key=key, value=item, op="add", zh=zh, source=s) for item in items)
        if old:
            for item in _split_items(old, zh=zh):
                facts.append(Fact("profile", key=key, value=item, op="remove", zh=zh, source=s))
        if key == "dislikes":  # no longer liked
            for item in items:
                facts.append(Fact("profile", key="likes", value=item, op="remove", zh=zh, source=s))
                facts.append(Fact("profile", key="prefers", value=item, op="remove", zh=zh, source=s))
        elif key in ("likes", "prefers"):
            for item in items:
                facts.append(Fact("profile", key="dislikes", value=item, op="remove", zh=zh, source=s))
    else:
        facts.append(Fact("profile", key=key, value=items[0], op="set", old=old, zh=zh, source=s, corrects=corrects))
    return facts


def _values(key: str, value: str, *, zh: bool, sentence: str) -> list[str]:
    """The value(s) of `key` in `value`, each a whole phrase (rules_values.py); [] when there is none."""
    if zh:
        items = _split_items(value, zh=True) if key in LIST_KEYS else [value]
        items = [v for v in items if values.zh_value_ok(key, v)]
    elif key in ("likes", "dislikes", "prefers"):
        items = values.liking_items(value)
    elif key == "tools":
        items = values.tool_items(value)
    elif key == "languages":
        items = values.language_items(value)
    else:
        one = {
            "location": values.place, "hometown": values.place, "employer": values.employer, "role": values.role,
            "name": lambda v: values.name(v, sentence=sentence), "timezone": lambda v: v,
        }[key](value)
        items = [one]
    return [v for v in items if v and len(v) <= 60]
