"""One entry-point group and pluggy project per hook family; the runtime never imports tool plugins."""

from __future__ import annotations

import subprocess
import sys

from agentrt.server.auth import ENTRYPOINT_GROUP as AUTH_GROUP
from agentrt.server.models import ENTRYPOINT_GROUP as MODELS_GROUP
from agentrt.server.policies import ENTRYPOINT_GROUP as POLICIES_GROUP
from agentrt.toolhost import hookspecs as tool_hookspecs
from agentrt.toolhost._plugins import ENTRYPOINT_GROUP as TOOLS_GROUP

# What the runtime builds at start, with entry points on, in a fresh interpreter.
RUNTIME_MANAGERS = """
import sys
from agentrt.server.auth import get_auth_plugin_manager
from agentrt.server.models import get_model_plugin_manager
from agentrt.server.policies import get_policy_plugin_manager

get_auth_plugin_manager()
get_model_plugin_manager()
policies = get_policy_plugin_manager()
print(sorted(name for name in sys.modules if name.startswith("agentrt.plugins.")))
print(sorted(name for name, _ in policies.list_name_plugin()))
"""


def test_the_groups_are_distinct() -> None:
    groups = [TOOLS_GROUP, MODELS_GROUP, POLICIES_GROUP, AUTH_GROUP]
    assert groups == ["agentrt.tools", "agentrt.models", "agentrt.policies", "agentrt.auth"]
    assert tool_hookspecs.PROJECT_NAME == TOOLS_GROUP


def test_the_runtime_loads_policy_plugins_but_never_imports_tool_plugins() -> None:
    # The dev workspace installs agentrt-demo, whose demo_tools are in agentrt.tools and whose
    # refund policy and output checks are in agentrt.policies.
    done = subprocess.run(
        [sys.executable, "-c", RUNTIME_MANAGERS], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    imported, policies = done.stdout.splitlines()
    assert imported == "['agentrt.plugins.output_checks', 'agentrt.plugins.refund_policy']"
    assert policies == "['output_checks', 'refund_policy']"
