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

Questions and hypotheticals ("if …", "what if …", "如果…", "…吗？") are never read as facts. Time phrases
are not part of a value ("moved to Berlin last year" → Berlin; memory/extraction/time_phrases.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from mateclaw_mem.memory.extraction.time_phrases import drop_zh_time, strip_time

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

# Patterns are compiled on first use, not at import: the ~65 here cost ~20 ms, which every `serve`
# paid before its first request though only an extraction or a forget request reads them.
def _src(pattern: str, flags: int = 0) -> tuple[str, int]:
    return pattern, flags


@cache
def _re(pattern: str, flags: int = 0) -> re.Pattern[str]:
    return re.compile(pattern, flags)


def cjk() -> re.Pattern[str]:  # one CJK ideograph
    return _re(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


_SENTENCE_SPLIT = _src(r"(?<=[.!?])\s+|(?<=[。！？；;])|\n+")


def is_zh(text: str) -> bool:
    ideographs = len(cjk().findall(text))
    if not ideographs:
        return False
    first = re.search(r"[A-Za-z\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]", text)
    latin = len(re.findall(r"[A-Za-z]", text))
    # "我的时区是Asia/Shanghai" is Chinese even though most letters are Latin.
    return ideographs * 2 >= latin or bool(first and cjk().match(first.group(0)))


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _re(*_SENTENCE_SPLIT).split(text or "") if s and s.strip()]


_QUESTION_START = _src(
    r"^(?:do|does|did|can|could|would|will|should|shall|may|might|is|are|am|was|were|have|has|what|why|how|"
    r"when|where|who|whom|whose|which|isn't|aren't|don't|doesn't|didn't|won't|wouldn't|couldn't)\b",
    re.IGNORECASE,
)
_ZH_QUESTION = _src(
    r"(?:吗|么|呢|吧)[。.！!]?$|什么|怎么|为什么|是否|能不能|是不是|有没有|哪(?:里|儿|个|些)|多少|几"
)
_HYPOTHETICAL = _src(
    r"\b(?:if|suppose|supposing|imagine|imagining|assuming|hypothetically|pretend|in case|unless|"
    r"would|wish|maybe|perhaps|might)\b|如果|假如|假设|要是|万一|想象|假若|倘若|或许|也许|可能",
    re.IGNORECASE,
)
_REPORTED = _src(r"\b(?:he|she|they|my (?:friend|wife|husband|boss|colleague|mom|dad|brother|sister)) "
                 r"(?:said|says|thinks|told)\b|他说|她说|他们说", re.IGNORECASE)


def is_question(s: str) -> bool:
    t = s.strip()
    if t.endswith(("?", "？")):
        return True
    if _re(*_QUESTION_START).match(t):
        return True
    return bool(is_zh(t) and _re(*_ZH_QUESTION).search(t))


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


_PRONOUN_OBJECT = _src(
    r"^(?:it|this|that|these|those|them|you|your|the idea|what|how|when|to|him|her|us|doing that)\b",
    re.IGNORECASE,
)


def _ok_value(value: str, *, limit: int = 60) -> bool:
    return bool(value) and len(value) <= limit and not _re(*_PRONOUN_OBJECT).match(value)


def _split_items(value: str, *, zh: bool) -> list[str]:
    parts = re.split(r"、|，|,|/|\s+and\s+|\s+&\s+|和|以及|与|跟", value) if zh else re.split(
        r",\s*(?:and\s+)?|\s+and\s+|\s*/\s*|\s+&\s+", value, flags=re.IGNORECASE
    )
    return [p.strip(" .。") for p in parts if p.strip(" .。")]


# -- patterns ------------------------------------------------------------------------------------

_EN_EXPLICIT = _src(
    r"^(?:(?:hey|ok(?:ay)?|also|and|oh|so|btw)[,\s]+)*(?:(?:can|could|would|will) you\s+)?(?:please\s+|pls\s+)?"
    r"(?:remember|note|make a note|keep in mind|don't forget|do not forget|never forget|for the record)"
    r"(?:\s+(?:that|this))?\s*[:,]?\s+(?P<v>.+?)(?:,?\s*please)?[.!?]*$",
    re.IGNORECASE,
)
_ZH_EXPLICIT = _src(
    r"^(?:请|麻烦你?|帮我|你)?(?:记住|记下|记一下|记得|别忘了|不要忘了|不要忘记|备注一下|备忘)(?:一下)?"
    r"(?:这件事|这个)?[：:，,]?\s*(?P<v>.+?)[。！!]*$"
)

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

_I = r"(?:i|i'm|i am|i've|i have)"

# English profile patterns: (key, op, regex). First match per key wins; order matters.
_EN_PROFILE: list[tuple[str, str, tuple[str, int]]] = [
    ("name", "set", _src(r"\bmy name(?:'s| is)\s+(?P<v>[\w'.-]+(?:\s+[A-Z][\w'.-]*){0,2})", re.IGNORECASE)),
    ("name", "set", _src(r"^(?:please\s+)?call me\s+(?P<v>[\w'.-]+)", re.IGNORECASE)),
    ("name", "set", _src(r"^(?:i'm|i am) called\s+(?P<v>[\w'.-]+(?:\s+[A-Z][\w'.-]*)?)", re.IGNORECASE)),
    ("role", "set", _src(r"\b(?:i work|i'm working|i am working) as (?:an? |the )?(?P<v>[^,.;]+?)"
                         r"(?=\s+(?:at|for|in)\s|[,.;]|$)", re.IGNORECASE)),
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
    ("location", "set", _src(rf"\b{_I} (?:live|lived|living|based|located|reside|residing|moved)\s+(?:in|to) "
                             r"(?P<v>[^,.;]+)", re.IGNORECASE)),
    ("location", "set", _src(r"\b(?:i|i've|i have) (?:live|lived|moved) (?:in|to) (?P<v>[^,.;]+)",
                             re.IGNORECASE)),
    ("hometown", "set", _src(r"^(?:i'm|i am|i come) (?:originally )?from (?P<v>[^,.;]+)", re.IGNORECASE)),
    ("timezone", "set", _src(r"\bmy time ?zone is (?P<v>[\w/+:-]+(?:\s+time)?)", re.IGNORECASE)),
    ("timezone", "set", _src(r"\b(?:i'm|i am) (?:in|on) (?:the )?(?P<v>(?:UTC|GMT)\s?[+-]\s?\d{1,2}(?::\d\d)?|"
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
    ("likes", "add", _src(r"^(?:i'm|i am) (?:a (?:big |huge )?fan of|into) (?P<v>[^.;]+)", re.IGNORECASE)),
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


def is_explicit_remember(text: str) -> bool:
    """True when a message explicitly asks to remember something (bypasses extraction gates)."""
    for s in sentences(text):
        s2 = strip_lead(s)
        if _re(*_EN_EXPLICIT).match(s2) or _re(*_ZH_EXPLICIT).match(s2):
            return True
    return False


def remember_payload(text: str) -> str:
    """What an explicit remember request asks to keep ("remember that I take tea" -> "I take tea"),
    its sentences joined; "" when the text is no such request."""
    found = []
    for s in sentences(text):
        m = _re(*_EN_EXPLICIT).match(strip_lead(s)) or _re(*_ZH_EXPLICIT).match(strip_lead(s))
        if m:
            found.append(m.group("v").strip())
    return " ".join(found)


def strip_lead(s: str) -> str:
    return re.sub(r"^(?:[-*•>]\s*)+", "", s).strip()


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
    # Explicit requests first: "can you remember that …?" is a request, not a question.
    m = _re(*(_ZH_EXPLICIT if zh else _EN_EXPLICIT)).match(s) or _re(*(_EN_EXPLICIT if zh else _ZH_EXPLICIT)).match(s)
    if m:
        content = m.group("v").strip().rstrip("?？")
        if _re(*_RECALL_QUESTION).match(content):
            return []  # "can you remember what I said?" asks to recall; nothing to store
        facts: list[Fact] = []
        # Each clause of the request counts: "remember that I take tea without sugar, and my name
        # is Lena" is a note *and* a profile fact; neither may swallow the other.
        for clause in _re(*_CLAUSE_SPLIT).split(content):
            clause = clause.strip(" ,，;；")
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
    if is_question(s) or _re(*_REPORTED).search(s):
        return []
    return _statement_facts(s, zh=zh, explicit=False)


_RECALL_QUESTION = _src(r"^(?:what|where|who|whom|whose|when|which|how|why|if|whether)\b", re.IGNORECASE)
_CLAUSE_SPLIT = _src(r"\s*(?:,\s*and\s+(?:also\s+)?|;\s*|,\s*also\s+|；|，还有|，并且)\s*")


def _first_person(content: str) -> str:
    # "remember that I prefer tabs" -> "I prefer tabs"; leave other content alone.
    return re.sub(r"^(?:that|this)\s*[:,]?\s+", "", content, flags=re.IGNORECASE)


def _clean_note(content: str) -> str:
    note = re.sub(r"^(?:that|this)\s*[:,]?\s+", "", content.strip(), flags=re.IGNORECASE).strip(" .。")
    if not note:
        return ""
    return note[0].upper() + note[1:] if not is_zh(note) else note


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
        m = _re(*_NOT_BUT_EN).search(s)
        if m:
            old, new_value = _clean_value(m.group("old"), zh=False), _clean_value(m.group("new"), zh=False)
            corrected = True
            s = s[: m.start()] + m.group("new") + s[m.end():]
        else:
            m2 = _re(*_Y_NOT_X_EN).match(s)
            if m2:
                old, corrected = _clean_value(m2.group("old"), zh=False), True
                new_value = _clean_value(m2.group("new"), zh=False)
                s = m2.group("stmt")
    if not explicit and _re(*_HYPOTHETICAL).search(s):
        return []
    facts: list[Fact] = []
    # Decisions.
    dm = _re(*_ZH_DECISION).search(s) if zh else _re(*_EN_DECISION).match(s)
    if dm:
        value = next(g for g in (dm.groupdict().get(k) for k in ("v", "v2", "v3")) if g)
        value = _clean_note(value)
        if value:
            facts.append(Fact("decision", value=value, zh=zh, source=s))
            return facts
    seen_keys: set[str] = set()
    clauses = [drop_zh_time(c) for c in _zh_clauses(s)] if zh else _en_clauses(s)
    for key, _op, rx in _ZH_PROFILE if zh else _EN_PROFILE:
        for clause in clauses:
            if key in seen_keys and key not in LIST_KEYS:
                break
            facts.extend(_profile_match(key, rx, clause, zh=zh, old=old, corrects=corrected, seen_keys=seen_keys))
    if not facts and corrected and old and new_value:
        # "it's not Tuesday but Wednesday": replace the old text wherever memory has it.
        facts.append(Fact("replace", old=old, value=new_value, zh=zh, source=s))
    return facts


def _en_clauses(s: str) -> list[str]:
    """"I live in Berlin and I like Python" -> two statements, each starting with its subject."""
    parts = re.split(r",?\s+(?:and|but|also|plus)\s+(?=(?:i|i'm|i've|my|we|our)\b)|;\s*", s, flags=re.IGNORECASE)
    return [p.strip() for p in parts if p and p.strip()] or [s]


def _zh_clauses(s: str) -> list[str]:
    """"我喜欢咖啡，不喜欢茶": the second clause borrows the subject of the first."""
    parts = [p.strip() for p in re.split(r"[，,]", s) if p.strip()]
    out: list[str] = []
    for i, part in enumerate(parts):
        if i and not part.startswith(("我", "你", "他", "她", "它", "我们")) and re.match(
            r"(?:不|也|还|更|最|很|非常|特别|比较)?(?:喜欢|讨厌|爱|偏好|用|使用|住在|在)", part
        ):
            part = "我" + part
        out.append(part)
    return out or [s]


def _profile_match(
    key: str, rx: tuple[str, int], s: str, *, zh: bool, old: str, corrects: bool, seen_keys: set[str]
) -> list[Fact]:
    facts: list[Fact] = []
    pm = _re(*rx).search(s)
    if not pm:
        return facts
    value = _clean_value(pm.group("v"), zh=zh)
    if key == "employer" and zh and _re(*_ZH_CITY).search(value):
        key = "location"
    if (key in seen_keys and key not in LIST_KEYS) or not _ok_value(value):
        return facts
    if key == "name" and not zh and value.lower() in {"not", "a", "an", "the", "just"}:
        return facts
    seen_keys.add(key)
    if key in LIST_KEYS:
        for item in _split_items(value, zh=zh):
            if _ok_value(item):
                facts.append(Fact("profile", key=key, value=item, op="add", zh=zh, source=s))
        if old:
            for item in _split_items(old, zh=zh):
                facts.append(Fact("profile", key=key, value=item, op="remove", zh=zh, source=s))
        if key == "dislikes":  # no longer liked
            for item in _split_items(value, zh=zh):
                facts.append(Fact("profile", key="likes", value=item, op="remove", zh=zh, source=s))
                facts.append(Fact("profile", key="prefers", value=item, op="remove", zh=zh, source=s))
        elif key in ("likes", "prefers"):
            for item in _split_items(value, zh=zh):
                facts.append(Fact("profile", key="dislikes", value=item, op="remove", zh=zh, source=s))
    else:
        facts.append(Fact("profile", key=key, value=value, op="set", old=old, zh=zh, source=s, corrects=corrects))
    return facts
