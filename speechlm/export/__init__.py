"""`python -m speechlm.export`: the self-contained model folder lives in speechlm.model.folder."""
