"""The GPU operator's controllers and the pure renderer they share.

One module per controller (`controllers.nodes`, `controllers.driver`, `controllers.toolkit`,
`controllers.validator`, `controllers.deviceplugin`, `controllers.policy`), wired onto one
manager by `controllers.manager.setup_controllers`; ``gpuctrl manager`` (`controllers.cli`)
runs them.
"""
