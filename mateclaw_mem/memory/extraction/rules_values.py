"""Rules mode: what a value read out of the person's sentence may be before it becomes a PROFILE.md
line. The line is read in every prompt from then on, so it must be a whole phrase that is true of the
person on its own, never a piece cut from a clause or a reaction to something in view.

Measured on a replay of LoCoMo chats (issue 34.4), the rules wrote `likes: the thought Nate`, `likes:
the color`, `likes: texture` (reactions to a photo), `tools: like half of my lifeline`, `likes:
seeing them eat fruit - they get`. What is refused here, and why:

- a value that starts with a determiner or pronoun ("the color", "all the yellow leaves", "his
  tech", "my influence", "a new apartment"): it points at something in the conversation, not at a
  kind of thing the person likes;
- a value that holds a pronoun or a deictic word ("having them around", "escaping to that world",
  "the friends I have"): without the conversation it means nothing;
- a value that holds a verb ("skill is awesome", "the effects are"): it is a clause, not an object;
- a long value (over 6 words): rules cannot tell where its object ends;
- a place, an employer, a name, a language that is not a name (it starts with a capital: "Lyon",
  "Siemens"), and a tool that is neither a name nor a known lowercase tool ("tmux").

"Action and sci-fi movies" is one value (the genres share their noun); "hiking and photography",
"dramas and romcoms", "Python and Go" are two. A blank is better than a wrong line: what fails is
dropped, never repaired into a guess.
"""

from __future__ import annotations

import re

from mateclaw_mem.memory.extraction.rules_text import rx, src


def _set(words: str) -> frozenset[str]:
    return frozenset(words.split())


_DETERMINER = _set(
    "the this that these those his her their its your our my all both every each some any such a an no not "
    "what how when where why who which whatever whoever to it them him us you me one another other more most "
    "less much many lots plenty so too very really just also even only like about"
)
_CONTEXT = _set(
    "it it's its them they they're this that these those his her hers him their theirs you your yours you're "
    "here there something anything everything nothing someone somebody anyone anybody such i i'm me he she "
    "we us myself yourself themselves"
)
_VERB = _set(
    "is are was were am be been isn't aren't wasn't weren't gets got makes made has had have does did do can "
    "could will would should may might must feel feels felt looks seems turned brings helps"
)
_PREPOSITION = _set("in on at about with for of to from into around by through over under near")
_NOT_GERUND = _set("thing something anything everything nothing king ring spring string morning evening "
                   "wing sing swing bring ceiling during")
# Tools people write in lower case; anything else lower-case after "I use" is an activity ("I use
# painting to…"), not a tool.
_LOWER_TOOLS = _set(
    "vim neovim nvim emacs nano tmux git zsh bash fish docker kubernetes kubectl python rust golang java "
    "javascript typescript node nodejs linux ubuntu debian arch postgres postgresql mysql sqlite redis excel "
    "notion obsidian slack jira figma vscode react vue svelte django flask fastapi ruby php swift kotlin scala "
    "haskell elixir matlab latex markdown terraform ansible aws gcp azure jupyter pandas numpy pytorch "
    "tensorflow chatgpt"
)

# Where the object of "I like …" ends: a dash, a clause after a comma, an example ("like Bach").
_PHRASE_END = src(
    r"\s+[-–—]+\s+|\s*[–—]\s*|,\s+(?=(?:it|it's|they|they're|this|that|these|those|which|who|so|but|the|he|she|"
    r"we|i|i'm|you|as|because|since|especially|plus|though|although|even|just|really|and it|and they)\b)|"
    r"\s+(?:like|such as|including|especially|because|since|when|whenever|while|if|as long as|so that|"
    r"plus|though|although)\s+",
    re.IGNORECASE,
)
_PLACE_END = src(
    r"\s+(?:for|after|before|with|near|because|since|until|till|while|when|and|but|to|from|as|at|on|where|"
    r"originally|now|already|again|though)\b.*$",
    re.IGNORECASE,
)
_TOOL_END = src(r"\s+(?:for|at|in|on|to|with|from|when|because|every|daily|each|all|most|mostly|as)\b.*$",
                re.IGNORECASE)
_LANGUAGE_LEAD = src(r"^(?:a (?:little|bit of)|a little bit of|some|basic|fluent|conversational|native|good|"
                     r"decent|broken)\s+", re.IGNORECASE)


def _words(text: str) -> list[str]:
    return [w.casefold().replace("’", "'").strip(".,!?\"'“”‘’()") for w in text.split()]


def _clean(value: str) -> str:
    return value.strip(" \t\"'“”‘’`.,!?:;-–—")


def is_capitalised(value: str) -> bool:
    """A name: starts with a capital ("Lyon", "ETH Zurich"), or "the" and one ("the Netherlands")."""
    v = re.sub(r"^the\s+", "", value)
    return bool(v) and v[0].isupper()


def _gerund(word: str) -> bool:
    return word.endswith("ing") and len(word) > 4 and word not in _NOT_GERUND


def _split_and(value: str) -> list[str]:
    """Items of a list said in one breath: "hiking and photography" -> two, "action and sci-fi
    movies" -> one (the genres share their noun), "getting lost in stories and films" -> one (the
    "and" is inside the prepositional phrase)."""
    # The separators are kept, so a list joined back reads as said ("tea or coffee in the morning").
    pieces = re.split(r"(,\s*(?:and\s+|or\s+|&\s+)?|\s+(?:and|or)\s+|\s+&\s+|\s*/\s*)", value)
    parts = [(sep, p.strip()) for sep, p in zip(["", *pieces[1::2]], pieces[::2], strict=True) if p.strip()]
    if len(parts) < 2:
        return [p for _, p in parts]
    items = [parts[0][1]]
    for sep, part in parts[1:]:
        left, right = _words(items[-1]), _words(part)
        both_gerunds = _gerund(left[0]) and _gerund(right[0])
        inside_phrase = any(w in _PREPOSITION for w in left[1:])
        shared_noun = (len(left) == 1 and len(right) > 1 and not items[-1][0].isupper()
                       and not left[0].endswith("s") and not _gerund(left[0]))
        if not both_gerunds and (inside_phrase or shared_noun):
            items[-1] = f"{items[-1]}{sep}{part}"
        else:
            items.append(part)
    return items


def _plain_phrase(item: str, *, limit: int) -> bool:
    w = _words(item)
    return (0 < len(w) <= limit and w[0] not in _DETERMINER and not any(x in _CONTEXT for x in w)
            and not any(x in _VERB for x in w))


def liking_items(value: str) -> list[str]:
    """The items of a likes / dislikes / prefers value, each a whole phrase; [] when the value is a
    reaction, a clause or a fragment."""
    v = _clean(rx(*_PHRASE_END).split(value, maxsplit=1)[0])
    w = _words(v)
    if not w or w[0] in _DETERMINER or any(x in _VERB for x in w):
        return []
    # An item with a comma inside would come back as two from the PROFILE.md line (`likes: a, b`).
    return [_clean(i) for i in _split_and(v) if "," not in i and _plain_phrase(_clean(i), limit=6)]


def place(value: str) -> str:
    """A city or country: "Rome for two years after college" -> "Rome"; "" for "a new apartment",
    "the countryside"."""
    v = _clean(rx(*_PLACE_END).sub("", value))
    if not is_capitalised(v) or len(v.split()) > 4 or any(x in _CONTEXT for x in _words(v)):
        return ""
    return v


def employer(value: str) -> str:
    """"Spotify in the podcast team" -> "Spotify"; "" for "home", "myself", "a small startup"."""
    v = _clean(re.sub(r"\s+(?:in|as|since|on|where|doing|and|but|with|because|from)\b.*$", "", value,
                      flags=re.IGNORECASE))
    if not is_capitalised(v) or len(v.split()) > 5 or any(x in _CONTEXT for x in _words(v)):
        return ""
    return v


def role(value: str) -> str:
    """A job title: a few words, no pronoun, no verb ("product manager", not "the one who …")."""
    v = _clean(value)
    return v if _plain_phrase(v, limit=5) else ""


def name(value: str, *, sentence: str) -> str:
    """"Priya", "Alice Smith"; "" for "crazy" ("call me crazy"). A person who writes all in lower case
    ("my name is priya") still has a name; otherwise a name starts with a capital."""
    parts = _clean(value).split()
    if not parts:
        return ""
    lower_writer = not any(c.isupper() for c in sentence)
    if not parts[0][0].isupper() and not lower_writer:
        return ""
    kept = [parts[0]]
    for part in parts[1:]:  # "Priya and I work …": the name ends where the capitals do
        if not part[0].isupper() or part in ("I", "I'm"):
            break
        kept.append(part)
    out = " ".join(kept)
    return "" if _words(out)[0] in _DETERMINER | _CONTEXT | {"sure", "back", "here", "now"} else out


def language_items(value: str) -> list[str]:
    out = []
    for item in _split_and(_clean(value)):
        item = _clean(rx(*_LANGUAGE_LEAD).sub("", re.sub(r"\s+(?:at|with|to|in|when|for)\b.*$", "", item)))
        if item and all(w[0].isupper() for w in item.split()) and len(item.split()) <= 2:
            out.append(item)
    return out


def tool_items(value: str) -> list[str]:
    """Named tools: "Obsidian for notes and VS Code for coding" -> Obsidian, VS Code; none in "my
    influence and resources", "like half of my lifeline", "kids at a summer camp"."""
    out = []
    for item in re.split(r",\s*(?:and\s+)?|\s+and\s+|\s*/\s*|\s+&\s+", value):
        item = _clean(rx(*_TOOL_END).sub("", item.strip()))
        item = re.sub(r"^(?:an?|the)\s+(?=[A-Z0-9])", "", item)
        w = _words(item)
        if not w or len(w) > 4 or w[0] in _DETERMINER or any(x in _CONTEXT for x in w):
            continue
        if re.search(r"[A-Z0-9+#]", item) or item.casefold() in _LOWER_TOOLS:
            out.append(item)
    return out


# -- corrections --------------------------------------------------------------------------------

_NOT_A_CORRECTION = _set(
    "only just merely simply even also really much so too easy sure always because about in for to that "
    "this there it i we you they he she what how why when everyone everything anything all many"
)


def correction_ok(old: str, new: str = "") -> bool:
    """"not Tuesday but Wednesday", "Berlin, not Munich" correct a value; "not only …, but also …",
    "not just a hobby", "not easy … but I believe in you" do not. (`new` is checked when the sentence
    names it apart: "Y, not X" leaves it inside the statement.)"""
    for side in (old, new) if new else (old,):
        w = _words(side)
        if not w or len(w) > 4 or w[0] in _NOT_A_CORRECTION or any(x in _CONTEXT | _VERB for x in w):
            return False
    return True


# -- Chinese ------------------------------------------------------------------------------------


def zh_value_ok(key: str, value: str) -> bool:
    """"我喜欢你的回答", "我爱这个颜色": a reaction to the conversation, not a liking. "我用手机拍了很多照片":
    an event, not a tool."""
    if re.search(r"你|您", value) or re.match(r"[他她它这那其]", value):
        return False
    if key == "tools":
        return bool(re.search(r"[A-Za-z0-9]", value)) or (len(value) <= 4 and "了" not in value)
    return True
