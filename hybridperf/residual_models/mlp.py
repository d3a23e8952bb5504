"""Seed-ensemble of small torch MLPs for the log-residual (training side; needs torch).

The exported ONNX graph takes raw features, standardises them inside the graph, and returns one column
per seed; the runtime averages the columns. Training is deterministic given `seed`.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

Z_CLIP = 6.0  # standardised inputs are clipped to +-Z_CLIP standard deviations


class MLPResidual:
    """`n_seeds` MLPs (features -> hidden -> hidden -> 1) trained with Adam on squared log error."""

    def __init__(self, hidden=(128, 64), n_seeds: int = 3, epochs: int = 40, batch_size: int = 1024,
                 lr: float = 3e-3, weight_decay: float = 1e-4, seed: int = 0):
        self.hidden = hidden
        self.n_seeds = n_seeds
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.weight_decay = weight_decay
        self.seed = seed

    def _module(self, n_in: int):
        import torch
        from torch import nn

        class Net(nn.Module):
            def __init__(self, mean, std, hidden):
                super().__init__()
                self.register_buffer("mean", torch.as_tensor(mean, dtype=torch.float32))
                self.register_buffer("std", torch.as_tensor(std, dtype=torch.float32))
                layers, d = [], n_in
                for h in hidden:
                    layers += [nn.Linear(d, h), nn.SiLU()]
                    d = h
                layers.append(nn.Linear(d, 1))
                self.net = nn.Sequential(*layers)

            def forward(self, x):
                # clipped: a new GPU may sit far outside the training range of some feature
                return self.net(torch.clamp((x - self.mean) / self.std, -Z_CLIP, Z_CLIP))

        return Net(self.mean_, self.std_, self.hidden)

    def fit(self, X: np.ndarray, y: np.ndarray, sample_weight=None) -> "MLPResidual":
        import torch
        from torch import nn

        torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
        X = np.asarray(X, dtype=np.float32)
        y = np.asarray(y, dtype=np.float32).reshape(-1, 1)
        w = np.ones(len(X), np.float32) if sample_weight is None else np.asarray(sample_weight, np.float32)
        self.mean_ = X.mean(axis=0)
        std = X.std(axis=0)
        # a feature constant in training carries no information: unit scale keeps it harmless
        self.std_ = np.where(std < 1e-6, 1.0, np.maximum(std, 1e-3)).astype(np.float32)
        Xt, yt, wt = torch.from_numpy(X), torch.from_numpy(y), torch.from_numpy(w).reshape(-1, 1)
        members = []
        for s in range(self.n_seeds):
            torch.manual_seed(self.seed * 1000 + s)
            gen = torch.Generator().manual_seed(self.seed * 1000 + s)
            net = self._module(X.shape[1])
            opt = torch.optim.AdamW(net.parameters(), lr=self.lr, weight_decay=self.weight_decay)
            steps = self.epochs * int(np.ceil(len(X) / self.batch_size))
            sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=self.lr, total_steps=max(steps, 1))
            for _ in range(self.epochs):
                perm = torch.randperm(len(X), generator=gen)
                for i in range(0, len(X), self.batch_size):
                    b = perm[i:i + self.batch_size]
                    loss = (wt[b] * nn.functional.smooth_l1_loss(net(Xt[b]), yt[b], reduction="none", beta=0.1)).mean()
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    sched.step()
            net.eval()
            members.append(net)
        self.members_ = members
        return self

    def predict_members(self, X: np.ndarray) -> np.ndarray:
        """(rows, n_seeds) predictions of each seed."""
        import torch

        with torch.no_grad():
            Xt = torch.from_numpy(np.asarray(X, dtype=np.float32))
            return np.column_stack([m(Xt).numpy()[:, 0] for m in self.members_]).astype(np.float64)

    def predict(self, X: np.ndarray) -> np.ndarray:
        return self.predict_members(X).mean(axis=1)

    def export_onnx(self, path: Path, opset: int = 17) -> None:
        """Write the ensemble as one ONNX graph: input `x` (rows, features) -> (rows, n_seeds)."""
        import torch

        class Stack(torch.nn.Module):
            def __init__(self, members):
                super().__init__()
                self.members = torch.nn.ModuleList(members)

            def forward(self, x):
                return torch.cat([m(x) for m in self.members], dim=1)

        model = Stack(self.members_).eval()
        dummy = torch.zeros(2, len(self.mean_), dtype=torch.float32)
        torch.onnx.export(model, (dummy,), str(path), input_names=["x"], output_names=["residual"],
                          dynamic_axes={"x": {0: "rows"}, "residual": {0: "rows"}}, opset_version=opset,
                          dynamo=False)
