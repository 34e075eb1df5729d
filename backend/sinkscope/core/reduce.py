"""The reducer: every per-head metric of docs/metrics.md summed over the rows it counts, while the chunks run.

Also the output projection's geometry the value metrics need: ||v W_O^h|| from the Gram matrix W_O^h' W_O^h.
"""

from __future__ import annotations

import torch

from sinkscope.core.names import HEAD

HEAD_SUMS = tuple(m.name for m in HEAD if m.name != "value_norm_ratio")  # summed over rows by Reducer.finish
NOTED = ("row_max_score", "row_max_weight", "weighted_score", "on_self", "on_previous", "learned")  # per row


def output_gram(output_weight: torch.Tensor, n_heads: int, head_dim: int) -> torch.Tensor:
    """W_O^h' W_O^h per head as (head, head_dim, head_dim) from W_O (d_model, head * head_dim):
    ||v W_O^h||^2 = v G_h v'."""
    w = output_weight.float().reshape(output_weight.shape[0], n_heads, head_dim)  # (d_model, head, head_dim)
    return torch.einsum("mhd,mhe->hde", w, w)


def projected_norms(vectors: torch.Tensor, gram: torch.Tensor) -> torch.Tensor:
    """||x W_O^h|| for vectors (..., head_dim) whose heads broadcast against gram (..., head_dim, head_dim)."""
    x = vectors.float()
    return (torch.matmul(x, gram) * x).sum(-1).clamp_min(0).sqrt()


def value_norms(output_weight: torch.Tensor, value: torch.Tensor, n_heads: int) -> torch.Tensor:
    """n[h, j] = || v_j^h W_O^h ||, as (kv_head, group, key_pos) in float32."""
    n_kv, _, head_dim = value.shape[1:]
    gram = output_gram(output_weight, n_heads, head_dim).reshape(n_kv, n_heads // n_kv, head_dim, head_dim)
    return projected_norms(value[0].unsqueeze(1), gram)  # (kv_head, 1, key_pos, d) against (kv, group, d, d)


class Reducer:
    """Per-head sums of the metrics in docs/metrics.md.

    The chunk loop notes six numbers per row and adds up each key's column (``note``, each named in ``NOTED``, and
    ``columns``: the only passes over the weights besides the softmax and the matmuls); ``finish`` turns them into
    every metric for all rows at once, each with the rows it counts, and into ``key_sums`` (``key_sink``). The
    chunk's matmul is A @ [V | n], so sum_j A[t,j] n_j comes with the head output.
    """

    def __init__(
        self, output_weight: torch.Tensor, value: torch.Tensor, n_heads: int, log_visible: torch.Tensor
    ) -> None:
        """output_weight: W_O (d_model, head * head_dim); log_visible (query_pos,): ln(keys each query can see), 1
        where only one (``MaskFacts``)."""
        n_kv, n_keys, head_dim = value.shape[1:]
        group, n_queries = n_heads // n_kv, log_visible.shape[0]
        self.gram = output_gram(output_weight, n_heads, head_dim).reshape(n_kv, group, head_dim, head_dim)
        self.norms = projected_norms(value[0].unsqueeze(1), self.gram)  # (kv_head, group, key_pos)
        self.head_dim, self.group = head_dim, group
        width = -(-(head_dim + group) // 8) * 8  # a multiple of 8 columns: MKL's bmm takes 72 faster than 67
        self.rhs = torch.zeros(n_kv, n_keys, width, device=value.device)  # (kv, key_pos, [V | n | 0])
        self.rhs[..., :head_dim] = value[0]
        self.rhs[..., head_dim : head_dim + group] = self.norms.transpose(1, 2)
        self.log_visible = log_visible
        offset = n_keys - n_queries
        key_of_row = torch.arange(offset, n_keys, device=value.device).view(1, 1, -1, 1)  # (1, 1, query_pos, 1)
        self.diagonal_at = key_of_row.expand(n_kv, group, -1, 1)
        self.previous_at = (key_of_row - 1).clamp_min(0).expand(n_kv, group, -1, 1)
        self.noted = {name: torch.zeros(n_kv, group, n_queries, device=value.device) for name in NOTED}
        self.in_q, self.from_two = key_of_row.view(-1) >= 1, key_of_row.view(-1) >= 2  # (query_pos,) row masks
        self.sums: dict[str, torch.Tensor] = {}  # metric -> (kv, group) float64, once ``finish`` has run
        self.columns = torch.zeros(n_keys, device=value.device)  # (key_pos,): sum over heads and rows of A[t, j]
        self.key_sums = torch.zeros(n_keys, dtype=torch.float64)  # ... without each key's own row, once finished

    def note(self, weights: torch.Tensor, scores: torch.Tensor, share: torch.Tensor | None, q0: int) -> None:
        """Rows ``q0 ..``: their largest score and weight, sum_j a s, the weights on themselves and the
        previous token, and the learned sink's share; weights, scores: (kv, group, rows, keys)."""
        q1 = q0 + weights.shape[-2]
        rows = {name: noted[..., q0:q1] for name, noted in self.noted.items()}  # (kv, group, rows) views
        self.columns[: weights.shape[-1]] += weights.reshape(-1, weights.shape[-1]).sum(0)  # (keys,)
        if share is not None:
            rows["learned"].copy_(share)
        torch.amax(scores, -1, out=rows["row_max_score"])
        torch.amax(weights, -1, out=rows["row_max_weight"])
        torch.sum(scores.mul_(weights), -1, out=rows["weighted_score"])
        torch.gather(weights, -1, self.diagonal_at[:, :, q0:q1], out=rows["on_self"].unsqueeze(-1))
        torch.gather(weights, -1, self.previous_at[:, :, q0:q1], out=rows["on_previous"].unsqueeze(-1))

    def finish(self, mixed: torch.Tensor, first_key: torch.Tensor) -> None:
        """Every metric per row, summed over the rows each counts: mixed is A @ rhs (kv, group, query_pos, width),
        first_key the weights on key 0 (kv, group, query_pos)."""
        noted = self.noted  # each (kv, group, query_pos)
        mass = 1 - noted["learned"]  # what the real keys share: 1 unless a learned sink took some
        # ln sum_j e^s - ln mass, from the row max: the largest weight is >= mass/T, so its log never underflows
        lse_of_weights = noted["row_max_score"] - noted["row_max_weight"].log()
        read = torch.diagonal(mixed[..., self.head_dim : self.head_dim + self.group], dim1=1, dim2=3)  # (kv, t, g)
        per_row = {  # metric -> (its value per row (kv, group, query_pos), the rows it counts (query_pos,))
            "sink": (first_key, self.in_q),
            "diagonal": (noted["on_self"], self.in_q),
            "previous_token": (noted["on_previous"], self.from_two),
            # -sum a ln a = mass (lse - ln mass) - sum a s, with no log pass over the weights
            "entropy": ((lse_of_weights * mass - noted["weighted_score"]) / self.log_visible, self.in_q),
            "value_sink": (first_key * self.norms[:, :, :1] / read.transpose(1, 2).clamp_min(1e-30), self.in_q),
            "learned_sink": (noted["learned"], self.in_q),
            "withheld": (torch.sigmoid(-(lse_of_weights + mass.log())), self.in_q),  # 1 / (1 + sum_j e^s)
            "output_norm": (projected_norms(mixed[..., : self.head_dim], self.gram), self.in_q),  # ||out W_O^h||
        }
        values = torch.stack([value for value, _ in per_row.values()])  # (metric, kv, group, query_pos)
        counted = torch.stack([rows for _, rows in per_row.values()])[:, None, None, :]  # (metric, 1, 1, query_pos)
        totals = torch.where(counted, values, 0.0).cpu().sum(-1, dtype=torch.float64)  # float64 on the host
        self.sums = dict(zip(per_row, totals, strict=True))  # metric -> (kv, group)
        on_self = noted["on_self"].sum((0, 1))  # (query_pos,): what each row gives itself, over the heads
        self.key_sums = self.columns.cpu().double()
        self.key_sums[-len(on_self) :] -= on_self.cpu().double()  # key_sink counts only the queries after a key

    def store(self, into: dict[str, dict[int, torch.Tensor]], layer: int) -> None:
        for name, total in self.sums.items():
            into[name][layer] = total.reshape(-1)  # (head,)
