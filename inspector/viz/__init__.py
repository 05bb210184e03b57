"""Plot builders: pure functions from engine records / numpy to plotly figures or HTML strings.

No torch, no gradio. One module per view: tokens, residual, attention, kvcache, sampling, inventory,
timing, header (model header + status line). Each view module has a one-line `CAPTION`. `heatimage`
draws the heatmaps redrawn on every step (residual norms, all attention heads) as one PNG with HTML axes.
`registry` lists the views: each one's name, tab and draw functions, read by the page, the API and the tour.
"""
