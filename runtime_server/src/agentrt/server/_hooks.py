"""One check shared by the runtime's plugin managers, which share the ``agentrt.plugins`` group."""

from __future__ import annotations

import pluggy

__all__ = ["reject_unknown_hooks"]


def reject_unknown_hooks(pm: pluggy.PluginManager, prefix: str) -> None:
    """Reject implementations of ``<prefix>*`` hooks that have no spec (misspelled names).

    ``pm.check_pending()`` would also reject the hooks other managers own (tools, models, auth),
    since plugins of the shared entry-point group may implement several of them.

    Raises:
        pluggy.PluginValidationError: Naming the hook and the plugin.
    """
    for name in vars(pm.hook):
        if not name.startswith(prefix):
            continue
        caller: pluggy.HookCaller = getattr(pm.hook, name)
        if caller.has_spec():
            continue
        for impl in caller.get_hookimpls():
            if not impl.optionalhook:
                raise pluggy.PluginValidationError(
                    impl.plugin, f"unknown hook {name!r} in plugin {impl.plugin_name!r}"
                )
