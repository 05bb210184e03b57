"""The Hugging Face Space: `bundle` assembles the deployable folder from this checkout, `deploy` uploads it."""
