"""The page's views: one module per view tab, each a `ViewPanel` (`inspector.ui.panel`) the registry lists."""
