"""The page's labs: one module per lab tab, each a `Panel` (`inspector.ui.panel`) the registry lists."""
