"""The MCP face: one agent's memory as MCP tools, over stdio (`mateclaw-mem mcp --agent NAME`) or
streamable HTTP (`/agents/<agent>/mcp` in the daemon, `/mcp` for the default agent; api/mcp_http.py).
One server serves one agent, and its name and instructions say which.

Tools are thin: parse arguments (the SDK validates them against the signatures), call a service,
render. A `MateclawError` becomes a tool error whose text is the service's message, so the model
reads what was wrong ("path '../x.md' contains '..'") instead of a generic failure.

Annotations are hints for clients deciding what needs confirmation; they are set from what each
tool really does: reads are read-only; writes that add without removing are non-destructive;
anything that replaces or deletes text is destructive (history keeps it, but the file changes);
a tool is idempotent when repeating the same call leaves the same files.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import Tool as MCPTool
from pydantic import AfterValidator, Field

from mateclaw_mem import __version__
from mateclaw_mem.mcp import (
    card_tools,
    contradiction_tools,
    fact_tools,
    features,
    forget_tools,
    learning_tools,
    profiles,
)
from mateclaw_mem.mcp.arguments import ToolSet
from mateclaw_mem.mcp.common import ADD, CHANGE, READ, REPLACE, call
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.workspace import tools as workspace_tools
from mateclaw_mem.workspace.owners import wire_owner
from mateclaw_mem.workspace.tool_args import also, spelled

ACTOR = "mcp"

INSTRUCTIONS = """\
Memory of agent {agent!r}, kept as Markdown files a person can read and edit.
Always-on files (AGENTS.md, SOUL.md, PROFILE.md, MEMORY.md) are in every prompt; daily notes live in
memory/YYYY-MM-DD.md; structured entries (remember/recall/forget) in structured/<type>.md.
File commands (view, create, str_replace, insert, delete, rename) take paths under /memories.
Every change is kept in history and can be undone by the person."""

# The workspace tools take the seed's argument names and ours (workspace/tool_args.py); every tool
# refuses a name it does not know (mcp/arguments.py).
Path_ = Annotated[str, Field(validation_alias=spelled("path"), description="file path inside the agent, e.g."
                             " MEMORY.md or memory/2026-01-31.md" + also("path"))]
MemPath = Annotated[str, Field(description="a path under /memories, e.g. /memories/notes.md")]
# "" is no owner, which the services spell None: converted here, as the arguments are validated.
Owner = Annotated[str | None, Field(description="owner key for personal memory (owner isolation)"),
                  AfterValidator(wire_owner)]
EntryType = Literal["user", "feedback", "project", "reference"]


def server_name(agent: str) -> str:
    """What a client shows for the server: the agent is in it, so two agents never look alike."""
    return f"mateclaw-mem ({agent})"


class _Server(MCPServer):
    """An MCPServer that answers a call to a tool it does not serve with why (outside the profile, or
    its feature off and the key to turn it on) instead of the SDK's bare "Unknown tool"."""

    def __init__(self, *args: Any, withheld: dict[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.withheld = withheld

    async def list_tools(self) -> list[MCPTool]:
        return [profiles.slim(t) for t in await super().list_tools()]

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None) -> Any:
        if name in self.withheld:
            raise ToolError(self.withheld[name])
        return await super().call_tool(name, arguments, context)


def build_server(services: Services, agent: str | None = None, profile: str = "all") -> MCPServer:
    """An MCP server bound to one agent (default: the configured default agent), named after it,
    serving the tools of one profile (mcp/profiles.py) whose feature is on (mcp/features.py). The
    faces default to the small `core` profile; `all` here keeps the whole set for in-process callers."""
    bound = agent or services.settings.default_agent
    profiles.check(profile)
    toolset = ToolSet()
    tools = services.tools

    def current() -> str:
        return bound

    # -- the seed's workspace memory tools ----------------------------------------------------------

    def list_workspace_memory_files(
        prefix: Annotated[str, Field(validation_alias=spelled("prefix"),
                                     description="only paths starting with this, e.g. memory/" + also("prefix"))] = "",
        owner: Owner = None,
    ) -> dict[str, Any]:
        """List the agent's memory files (filename, fileSize, enabled, sort order) and their count."""
        agent = current()
        return workspace_tools.listing(agent, call(lambda: tools.list(agent, prefix=prefix, owner=owner)))

    def read_workspace_memory_file(
        path: Path_,
        owner: Owner = None,
        part: Annotated[int, Field(ge=1, description="an oversized file comes in parts: which one")] = 1,
    ) -> dict[str, Any]:
        """Read a memory file. `sha` identifies this version (pass it back as expected_sha to write safely)."""
        agent = current()
        snap = call(lambda: tools.read(agent, path, owner=owner))
        return workspace_tools.file_read(agent, snap, tools.describe(agent, snap.rel, owner=owner),
                                         max_bytes=services.store.file_max_bytes, part=part)

    def write_workspace_memory_file(
        path: Path_,
        content: Annotated[str, Field(description="the whole new content")],
        expected_sha: Annotated[str | None, Field(description="refuse unless the file still has this sha")] = None,
        owner: Owner = None,
    ) -> dict[str, Any]:
        """Replace (or create) a memory file. New files start disabled (not in the always-on prompt)."""
        agent = current()
        r = call(lambda: tools.write(agent, path, content, actor=ACTOR, owner=owner, expected_sha=expected_sha))
        return workspace_tools.write_answer(agent, r)

    def edit_workspace_memory_file(
        path: Path_,
        old_text: Annotated[str, Field(validation_alias=spelled("old_text"),
                                       description="exact text to find" + also("old_text"))],
        new_text: Annotated[str, Field(validation_alias=spelled("new_text"),
                                       description="replacement" + also("new_text"))],
        replace_all: Annotated[bool, Field(validation_alias=spelled("replace_all"),
                                           description="replace every occurrence" + also("replace_all"))] = False,
        owner: Owner = None,
    ) -> dict[str, Any]:
        """Find and replace text in a memory file (the text must be unique unless replace_all)."""
        agent = current()
        r = call(lambda: tools.edit(agent, path, old_text, new_text, actor=ACTOR, owner=owner,
                                    replace_all=replace_all))
        return workspace_tools.write_answer(agent, r.write, replacements=r.replacements)

    def write_memory(
        path: Path_,
        strategy: Annotated[
            Literal["append", "replace_section", "upsert_kv", "overwrite"],
            Field(description="append: add at the end (of `section` if given); replace_section: replace the"
                  " `## section` or add it; upsert_kv: set `key: value` lines in place; overwrite: replace the body"),
        ],
        content: Annotated[str, Field(description="the text; upsert_kv: `key: value` lines (or the value of `key`)")],
        section: Annotated[str | None, Field(description="`##` section title to write in", min_length=1)] = None,
        key: Annotated[str | None, Field(description="upsert_kv only: set this one key to `content`",
                                         min_length=1)] = None,
        owner: Owner = None,
    ) -> dict[str, Any]:
        """Merge text into a memory file without rewriting it: append, replace a section, set key: value lines."""
        agent = current()
        r = call(lambda: tools.write_memory(agent, path, content, strategy=strategy, section=section, key=key,
                                            actor=ACTOR, owner=owner))
        return workspace_tools.write_answer(agent, r, strategy=strategy)

    toolset.add_tool(list_workspace_memory_files, annotations=READ)
    toolset.add_tool(read_workspace_memory_file, annotations=READ)
    toolset.add_tool(write_workspace_memory_file, annotations=REPLACE)
    toolset.add_tool(edit_workspace_memory_file, annotations=CHANGE)
    # overwrite and replace_section replace text; append adds again on every repeat: not idempotent.
    toolset.add_tool(write_memory, annotations=CHANGE)

    # -- keyword search ------------------------------------------------------------------------------

    def search_memory(
        query: Annotated[str, Field(description="keywords (Latin or CJK)", min_length=1)],
        limit: Annotated[int, Field(ge=1, le=50)] = 8,
        scope: Annotated[
            Literal["all", "memory", "profile", "persona", "conversations", "files"],
            Field(description="all: files and past conversations; memory: what was learned; files: every file"),
        ] = "all",
        owner: Owner = None,
    ) -> dict[str, Any]:
        """Keyword search over the agent's memory files, daily notes, archives and past conversations."""
        result = call(lambda: services.search.search(query, agent=current(), owner=owner, scope=scope, limit=limit))
        return result.to_dict()

    toolset.add_tool(search_memory, annotations=READ)

    # -- structured entries --------------------------------------------------------------------------

    def remember(
        type: Annotated[EntryType, Field(description="user, feedback, project or reference")],
        key: Annotated[str, Field(description="short name of the entry, e.g. coffee")],
        text: Annotated[str, Field(description="what to remember")],
        owner: Owner = None,
    ) -> dict[str, Any]:
        """Add a structured entry, or replace the one with the same key."""
        r = call(lambda: services.structured.remember(current(), type, key, text, actor=ACTOR, owner=owner))
        return {"type": r.type, "key": r.entry.key, "created": r.created, "changed": r.changed}

    def recall(
        type: Annotated[EntryType | None, Field(description="only this type")] = None,
        key: Annotated[str | None, Field(description="only the entry with this key")] = None,
        owner: Owner = None,
    ) -> list[dict[str, Any]]:
        """Structured entries, all or of one type, or the one with a given key."""
        return [e.as_dict() for e in call(lambda: services.structured.recall(current(), type, key, owner=owner))]

    def forget(
        type: Annotated[EntryType, Field(description="user, feedback, project or reference")],
        key: Annotated[str, Field(description="the entry's key")],
        owner: Owner = None,
    ) -> dict[str, Any]:
        """Remove a structured entry (the previous file version stays in history)."""
        return call(lambda: services.structured.forget(current(), type, key, actor=ACTOR, owner=owner)).as_dict()

    toolset.add_tool(remember, annotations=REPLACE)
    toolset.add_tool(recall, annotations=READ)
    toolset.add_tool(forget, annotations=REPLACE)

    # -- the standard file-memory command set ----------------------------------------------------------

    commands = services.file_commands

    def view(
        path: MemPath = "/memories",
        view_range: Annotated[
            list[int] | None, Field(description="[first, last] line to show (last -1 = to the end)",
                                    min_length=2, max_length=2)
        ] = None,
    ) -> str:
        """Show a folder's files, or a file's lines numbered from 1."""
        rng = (view_range[0], view_range[1]) if view_range else None
        return call(lambda: commands.view(current(), path, view_range=rng)).text

    def create(path: MemPath, file_text: Annotated[str, Field(description="the file's content")]) -> str:
        """Create a file, or replace the content of an existing one."""
        return call(lambda: commands.create(current(), path, file_text, actor=ACTOR)).text

    def str_replace(
        path: MemPath,
        old_str: Annotated[str, Field(description="exact text to replace; must occur exactly once")],
        new_str: Annotated[str, Field(description="replacement text")],
    ) -> str:
        """Replace text that occurs exactly once in a file."""
        return call(lambda: commands.str_replace(current(), path, old_str, new_str, actor=ACTOR)).text

    def insert(
        path: MemPath,
        insert_line: Annotated[int, Field(ge=0, description="insert after this line (0 = at the top)")],
        insert_text: Annotated[str, Field(description="the text to insert")],
    ) -> str:
        """Insert text after a line of a file (lines numbered as `view` shows them)."""
        return call(lambda: commands.insert(current(), path, insert_line, insert_text, actor=ACTOR)).text

    def delete(path: MemPath) -> str:
        """Delete a file or a folder of files (kept in history; a person can undo it)."""
        return call(lambda: commands.delete(current(), path, actor=ACTOR)).text

    def rename(old_path: MemPath, new_path: MemPath) -> str:
        """Rename or move a file or folder; the target must not exist."""
        return call(lambda: commands.rename(current(), old_path, new_path, actor=ACTOR)).text

    toolset.add_tool(view, annotations=READ)
    toolset.add_tool(create, annotations=REPLACE)
    toolset.add_tool(str_replace, annotations=CHANGE)
    toolset.add_tool(insert, annotations=ADD)
    toolset.add_tool(delete, annotations=REPLACE)  # repeating it changes nothing more: idempotent
    toolset.add_tool(rename, annotations=REPLACE)

    # -- learning memory (issue 8) -------------------------------------------------------------------------

    learning_tools.register(toolset, services, current)
    fact_tools.register(toolset, services, current)  # facts: list/search, feedback, confirm (issue 17)
    forget_tools.register(toolset, services, current)  # memory_forget (issue 17)
    card_tools.register(toolset, services, current)  # the morning card, SOUL.md proposals (issue 17)
    contradiction_tools.register(toolset, services, current)  # the contradiction inbox (issue 17)

    off = features.tools_off(services.settings)
    withheld = {t.name: off.get(t.name) or profiles.refusal(profile, t.name) for t in toolset.tools
                if t.name in off or not profiles.includes(profile, t.name)}
    served = [t for t in toolset.tools if t.name not in withheld]
    return _Server(server_name(bound), version=__version__, instructions=INSTRUCTIONS.format(agent=bound),
                   tools=served, withheld=withheld)


def run_stdio(services: Services, agent: str | None = None, profile: str = profiles.DEFAULT) -> None:
    """Serve over stdin/stdout until the client closes the pipe."""
    build_server(services, agent, profile).run("stdio")
