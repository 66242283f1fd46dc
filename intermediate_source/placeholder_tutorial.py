"""
Placeholder
===========

A throw-away page that proves the build works; it goes once a real tutorial lands.
"""

# %%
import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"Running on {device}")
x = torch.randn(8, device=device)
torch.testing.assert_close(torch.compile(torch.sin)(x), torch.sin(x))
print("compiled sin matches eager")
