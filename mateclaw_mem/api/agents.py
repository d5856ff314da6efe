"""`/api/v1/agents`: list the agents and create one, fully seeded (the HTTP twin of `mateclaw-mem init`).

Agents exist only when created (here, by `init`, or the daemon's first start for the default and AML
agents); every route under `/api/v1/agents/{agentId}` and `/api/v1/memory/{agentId}` answers 404 for
any other name. Creating an agent that exists is not an error: 200 with `created: false`, after
seeding whatever always-on file is missing — as `init` does, so a client may call it on every
start without first asking whether the agent is there.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Response
from pydantic import ConfigDict, Field

from mateclaw_mem.api.auth import require_api_key
from mateclaw_mem.api.deps import AGENT_PATTERN, get_services
from mateclaw_mem.api.mcp_http import agent_mcp_path
from mateclaw_mem.errors import NotFoundError
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.wire import Wire

router = APIRouter(prefix="/api/v1/agents", tags=["agents"], dependencies=[Depends(require_api_key)])


class AgentIn(Wire):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)

    agent_id: str = Field(alias="agentId", pattern=AGENT_PATTERN, description="the new agent's name, e.g. work")


class AgentOut(Wire):
    model_config = ConfigDict(populate_by_name=True)

    agent_id: str = Field(alias="agentId")
    created: bool = Field(description="false when the agent already existed")
    seeded_files: list[str] = Field(alias="seededFiles", description="always-on files created by this call")
    mcp_path: str = Field(alias="mcpPath", description="its MCP endpoint (streamable HTTP)")


class AgentList(Wire):
    agents: list[str]


@router.get("", response_model=AgentList, summary="the agents of this workspace")
def list_agents(services: Services = Depends(get_services)) -> AgentList:
    return AgentList(agents=services.store.agents())


@router.post("", response_model=AgentOut, response_model_by_alias=True, status_code=201,
             summary="create an agent with its seeded files (200 if it already exists)",
             responses={200: {"model": AgentOut, "description": "the agent already existed"}})
def create_agent(body: AgentIn, response: Response, services: Services = Depends(get_services)) -> AgentOut:
    store = services.store
    try:
        store.require_agent(body.agent_id)
        existed = True
    except NotFoundError:
        existed = False
    seeded = store.ensure_agent(body.agent_id)
    if existed:
        response.status_code = 200
    return AgentOut(agent_id=body.agent_id, created=not existed, seeded_files=seeded,
                    mcp_path=agent_mcp_path(body.agent_id))
