"""Decoding the turns of several episodes together: the shared prefix prefilled once, a KV cache kept per episode.

The per-turn path (:func:`trainers.generation.decode` on :func:`~trainers.generation.prompt_ids`) renders the
whole conversation at every turn and prefills all of it from scratch, one episode at a time. Here
(:class:`ModelTurns`), for each turn of each episode:

1. the conversation is still rendered whole, by the same :func:`~trainers.generation.prompt_ids` (so a tool
   format's rendering drops in), and the ids are compared with those the episode's cache holds (its previous
   prompt and the tokens generated after it). Normally the render extends them. Where the chat template renders
   an earlier turn differently (*token drift*: a parsed tool call re-serialised, a turn cut at the token cap and
   closed by the template, a history the template rewrites), the cache is cut back to the longest common prefix
   and the rest is prefilled; :class:`DecodeStats` counts those turns and tokens. The model therefore always
   conditions on exactly the full render, which :class:`~trainers.generation.Decoded` records, so GRPO scores the
   tokens the model produced after the prompt it saw;
2. a new episode starts from the shared prefix: the ids its prompt shares with the render of its system message
   alone (the system prompt and the tool list), prefilled once per run and shared read-only by every episode;
3. the rest of each prompt is prefilled on the episode's own cache, and the decode steps of all the episodes that
   asked for a turn run as one batch, each row stopping at its own end token.

Greedy outputs are those of the per-turn path token for token, not bit for bit: on the CPU a matrix product over
one row runs another kernel than over several, and a prompt prefilled in two chunks sums in another order, so
logits differ in the last bits (about 1e-6 here) and only an exact tie could pick another token
(tests/test_episodes.py compares every turn). Within this path the batch changes nothing: each row attends to its
own keys, unpadded (:func:`_rows_attention`), and every decode step runs at least :data:`MIN_ROWS` rows, since on
one CPU thread a matrix product over 4 or more rows gives every row the same bits whatever the other rows are
(measured; over 1 to 3 rows it did not). Models under 50 M parameters decode on one thread. Split over two threads,
a product gave one row other bits at some batch sizes (measured), so a larger model on several CPU threads, or a
GPU, can see the last bits change with the batch as well; its turns then match token for token, exact ties aside.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

from .formats import ToolFormat, format_of
from .generation import Decoded, cache_argument, decode, is_small_model, prompt_ids, stop_ids, turn_text
from .turns import TurnRequest

DEFAULT_SLOTS = 8
"""Episodes decoded together by default."""
MIN_ROWS = 4
"""Rows of every batched decode step; missing rows repeat the first (see the module docstring)."""
ROWS_ATTENTION = "blobkit_rows"
"""The attention implementation registered for batched decode steps (sdpa, one row at a time)."""

KV = list[tuple[Any, Any]]
"""Per layer (keys, values), each a tensor [1, kv_heads, tokens, head_dim]."""


@dataclass
class DecodeStats:
    """What the episodes of a policy cost, in tokens (summed over its runs)."""

    turns: int = 0
    """Assistant turns decoded."""
    reference_prefill: int = 0
    """Tokens the per-turn path would have prefilled: every turn's whole prompt."""
    prefilled: int = 0
    """Tokens prefilled here: each shared prefix once per run, then each turn's tokens beyond the cache."""
    shared_prefix: int = 0
    """Tokens of shared prefixes prefilled (part of ``prefilled``)."""
    drift_turns: int = 0
    """Turns whose full render did not extend the episode's previous prompt and generated ids (token drift)."""
    drift_tokens: int = 0
    """Of those previous ids, how many the render did not reproduce (their cache was dropped)."""
    generated: int = 0
    """Tokens generated."""
    decode_steps: int = 0
    """Batched forward calls made while decoding (one per generated token position)."""

    def to_json(self) -> dict[str, int]:
        """The counters as a plain dict."""
        return asdict(self)


@dataclass
class _Episode:
    ids: list[int]
    """Its previous prompt and the ids generated after it (or the shared prefix, before its first turn)."""
    kv: KV
    """Keys and values of the first ``cached`` of ``ids`` (a turn's last generated id is never run)."""
    cached: int


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two id sequences."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _rows_attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any,
                    **kwargs: Any) -> tuple[Any, None]:
    """sdpa, except that in a batched decode step each row attends to its own (left-padded) keys alone, unpadded.

    Padding inside an attention kernel changes its sums in the last bits; per row, the keys and the shapes are
    those of the episode decoded alone.
    """
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if query.shape[0] == 1 or query.shape[2] != 1:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    if attention_mask is None:
        starts = [0] * query.shape[0]
    else:
        allowed = attention_mask[:, 0, -1, :]
        allowed = allowed if allowed.dtype == torch.bool else allowed == 0
        starts = (~allowed).sum(-1).tolist()
    rows = [sdpa_attention_forward(module, query[b:b + 1], key[b:b + 1, :, start:], value[b:b + 1, :, start:], None,
                                   **kwargs)[0] for b, start in enumerate(starts)]
    return torch.cat(rows), None


def _register_rows_attention() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    AttentionInterface.register(ROWS_ATTENTION, _rows_attention)
    AttentionMaskInterface.register(ROWS_ATTENTION, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])


def _inner(model: Any) -> Any:
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def _plain_layers(model: Any) -> bool:
    """Whether the model's KV cache is plain full-attention layers (which can be cut, copied and stacked)."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    return all(type(layer) is DynamicLayer for layer in DynamicCache(config=_inner(model).config).layers)


@contextmanager
def _decoding(model: Any, batched: bool) -> Iterator[None]:
    """Evaluation mode without gradients, one thread for a small model on CPU, rows attention when ``batched``."""
    import torch

    inner, was_training, threads = _inner(model), model.training, torch.get_num_threads()
    original = inner.config._attn_implementation
    model.eval()
    if next(model.parameters()).device.type == "cpu" and is_small_model(model):
        torch.set_num_threads(1)  # as trainers.generation.decode does (measured there)
    if batched:
        _register_rows_attention()
        inner.set_attn_implementation(ROWS_ATTENTION)
    try:
        with torch.inference_mode():
            yield
    finally:
        if batched:
            inner.set_attn_implementation(original)
        torch.set_num_threads(threads)
        if was_training:
            model.train()


class ModelTurns:
    """A :class:`~trainers.turns.TurnPolicy` over a torch model: greedy (``temperature == 0``) or sampled turns.

    Every turn it decodes is kept, per episode, in :attr:`decoded` (until the next run begins), so GRPO scores
    exactly the ids the model produced; :attr:`stats` counts what the turns cost. Models whose KV cache is not made
    of plain full-attention layers (sliding windows, linear attention), or whose attention is not sdpa, are
    decoded one episode at a time, still with their caches kept across turns where the layers allow it.
    """

    def __init__(self, model: Any, tokenizer: Any, max_new_tokens: int, temperature: float = 0.0,
                 generator: Any = None, slots: int = DEFAULT_SLOTS, tool_format: ToolFormat | None = None,
                 constraint: Any = None) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.max_new_tokens, self.temperature, self.generator = max_new_tokens, temperature, generator
        self.tool_format: ToolFormat = tool_format or format_of(tokenizer)
        """The format turns are written and parsed in (given, else the one the tokenizer's chat template belongs to,
        :func:`trainers.formats.format_of`, which refuses a template of no known format)."""
        self.end_ids = stop_ids(tokenizer, self.tool_format)
        self.cache_argument = cache_argument(model)
        self.cacheable = _plain_layers(model)
        self.batched = self.cacheable and _inner(model).config._attn_implementation == "sdpa"
        self.slots = slots if self.batched else 1
        self.constraint = constraint
        """A :class:`trainers.constrained.ToolCallConstraint` masking each turn's logits to its grammar, or None
        (free decoding). Only the tokens chosen change; the text is parsed and judged as any turn."""
        if constraint is not None and not self.cacheable:
            from .errors import ConfigError

            raise ConfigError("--decoding constrained decodes with a kept KV cache, which this model's cache layers "
                              "(sliding window or linear attention) do not allow: use --decoding free")
        self.stats = DecodeStats()
        self.decoded: dict[int, list[Decoded]] = {}
        self._episodes: dict[int, _Episode] = {}
        self._prefixes: dict[tuple[int, ...], KV] = {}

    def begin(self) -> None:
        """A new run: caches and records of the previous one are dropped (the weights may have changed)."""
        self._episodes, self._prefixes, self.decoded = {}, {}, {}

    def end(self, key: int) -> None:
        """Drop episode ``key``'s cache (its records stay in :attr:`decoded`)."""
        self._episodes.pop(key, None)

    def done(self) -> None:
        """Drop every cache and shared prefix; :attr:`decoded` stays until the next :meth:`begin`."""
        self._episodes, self._prefixes = {}, {}

    def next_turns(self, requests: Sequence[TurnRequest]) -> list[str]:
        """Decode the next turn of every request (batched when the model allows); return their texts."""
        prompts = [prompt_ids(self.tokenizer, r.messages, r.tools) for r in requests]
        if not self.cacheable:
            outputs = [self._per_turn(prompt) for prompt in prompts]
        else:
            matchers = [self.constraint.matcher(r.messages, r.tools) if self.constraint else None for r in requests]
            with _decoding(self.model, self.batched):
                rows = [self._prefill(request, prompt) for request, prompt in zip(requests, prompts, strict=True)]
                if self.batched:
                    outputs = self._decode(rows, matchers)
                else:
                    outputs = [out for row, matcher in zip(rows, matchers, strict=True)
                               for out in self._decode([row], [matcher])]
        texts = []
        for request, prompt, (new_ids, finished, kv) in zip(requests, prompts, outputs, strict=True):
            self.decoded.setdefault(request.key, []).append(Decoded(prompt, new_ids, finished))
            if self.cacheable:
                self._episodes[request.key] = _Episode(prompt + new_ids, kv, len(prompt) + len(new_ids) - 1)
            self.stats.turns += 1
            self.stats.generated += len(new_ids)
            texts.append(turn_text(self.tokenizer, new_ids, self.tool_format))
        return texts

    def _per_turn(self, prompt: list[int]) -> tuple[list[int], bool, KV]:
        """The per-turn path, for a model whose cache cannot be kept: the whole prompt prefilled."""
        self.stats.reference_prefill += len(prompt)
        self.stats.prefilled += len(prompt)
        turn = decode(self.model, prompt, self.end_ids, max_new_tokens=self.max_new_tokens,
                      temperature=self.temperature, generator=self.generator)
        return turn.new_ids, turn.finished, []

    # ------------------------------------------------------------------ prefill

    def _start(self, request: TurnRequest, prompt: list[int]) -> _Episode:
        """A new episode's cache: the shared prefix (prefilled on first use in this run), or nothing."""
        from jinja2 import TemplateError

        messages = request.messages
        if not self.cacheable or not messages or messages[0].get("role") != "system":
            return _Episode([], [], 0)
        try:
            system = prompt_ids(self.tokenizer, messages[:1], request.tools)
        except (TemplateError, ValueError):  # a template that will not render a system message alone: no sharing
            return _Episode([], [], 0)
        prefix = tuple(prompt[:min(common_prefix(system, prompt), len(prompt) - 1)])
        if prefix and prefix not in self._prefixes:
            self._prefixes[prefix] = self._forward([], list(prefix))[0]
            self.stats.prefilled += len(prefix)
            self.stats.shared_prefix += len(prefix)
        return _Episode(list(prefix), self._prefixes.get(prefix, []), len(prefix))

    def _prefill(self, request: TurnRequest, prompt: list[int]) -> tuple[KV, int, Any]:
        """(the cache after ``prompt``, its length, the logits after it): only the ids beyond the cache are run."""
        self.stats.reference_prefill += len(prompt)
        episode = self._episodes.get(request.key) or self._start(request, prompt)
        shared = common_prefix(episode.ids, prompt)
        if shared < len(episode.ids):  # token drift: the render does not extend the previous prompt and turn
            self.stats.drift_turns += 1
            self.stats.drift_tokens += len(episode.ids) - shared
        kept = min(shared, episode.cached, len(prompt) - 1)  # at least one id is run, for the next logits
        kv = [(keys[:, :, :kept], values[:, :, :kept]) for keys, values in episode.kv]
        self.stats.prefilled += len(prompt) - kept
        kv, logits = self._forward(kv, prompt[kept:])
        return kv, len(prompt), logits

    def _forward(self, kv: KV, ids: list[int]) -> tuple[KV, Any]:
        """Run ``ids`` (one sequence) on top of ``kv``; return the extended cache and the last position's logits."""
        import torch

        cache = self._cache(kv)
        device = next(self.model.parameters()).device
        output = self.model(input_ids=torch.tensor([ids], device=device), use_cache=True, logits_to_keep=1,
                            **{self.cache_argument: cache})
        return [(layer.keys, layer.values) for layer in cache.layers], output.logits[0, -1].float()

    def _cache(self, kv: KV) -> Any:
        """A DynamicCache holding ``kv`` as it is (no copy: layers grow by concatenation, never in place)."""
        from transformers import DynamicCache

        cache = DynamicCache(config=_inner(self.model).config)
        layers: list[Any] = cache.layers
        for layer, (keys, values) in zip(layers, kv, strict=False):
            layer.lazy_initialization(keys, values)
            layer.keys, layer.values = keys, values
        return cache

    # ------------------------------------------------------------------ batched decode

    def _choose(self, logits: Any) -> list[int]:
        """The next token of each row: argmax, or a draw from the tempered softmax with the policy's generator."""
        import torch

        if self.temperature > 0:
            probs = torch.softmax(logits / self.temperature, dim=-1)
            return [int(t) for t in torch.multinomial(probs.cpu(), 1, generator=self.generator)[:, 0].tolist()]
        return [int(t) for t in torch.argmax(logits, dim=-1).tolist()]

    def _decode(self, rows: list[tuple[KV, int, Any]], matchers: Sequence[Any] | None = None,
                ) -> list[tuple[list[int], bool, KV]]:
        """Decode every row together until each stops: (new ids, whether an end token ended it, its cache).

        A row's returned cache holds its prompt and its new ids but the last (which was never run). ``matchers``:
        per row, a :class:`trainers.constrained.TurnMatcher` (or None) that masks its logits before each choice.
        """
        import torch

        live = list(range(len(rows)))  # the rows still decoding, in the order of the batch's first rows
        batch = _Batch.stack([kv for kv, _, _ in rows], [length for _, length, _ in rows], self)
        logits = torch.stack([row_logits for _, _, row_logits in rows])
        new_ids: list[list[int]] = [[] for _ in rows]
        results: dict[int, tuple[list[int], bool, KV]] = {}
        for step in range(self.max_new_tokens):
            for position, row in enumerate(live):
                if matchers and matchers[row] is not None:
                    matchers[row].mask(logits[position])
            tokens = self._choose(logits[:len(live)])
            keep = []
            for position, (row, token) in enumerate(zip(live, tokens, strict=True)):
                if matchers and matchers[row] is not None:
                    matchers[row].advance(token)
                new_ids[row].append(token)
                ended = token in self.end_ids
                if ended or step == self.max_new_tokens - 1:
                    results[row] = (new_ids[row], ended, batch.row(position))
                else:
                    keep.append(position)
            if not keep:
                break
            live = [live[position] for position in keep]
            if len(keep) < len(tokens):
                batch.select(keep)
            logits = batch.step([tokens[position] for position in keep])
            self.stats.decode_steps += 1
        return [results[row] for row in range(len(rows))]


def _layer_class() -> type:
    """:class:`_BufferLayer`, defined on first use (transformers is imported lazily)."""
    global _BUFFER_LAYER
    if _BUFFER_LAYER is None:
        from transformers.cache_utils import DynamicLayer

        class BufferLayer(DynamicLayer):
            """A full-attention cache layer that appends into spare room instead of concatenating.

            DynamicLayer copies the whole cache at every token (``torch.cat``); over a batch of long prompts that
            copy cost more than the forward itself (SmolLM2, 8 rows of ~1,900 tokens, measured). ``keys`` and
            ``values`` are views of the filled part ``[start, used)`` of a buffer with room for ``capacity``.
            """

            def __init__(self, keys: Any, values: Any, used: int) -> None:
                super().__init__()
                self.device, self.is_initialized = keys.device, True
                self.buffers, self.start, self.used = (keys, values), 0, used
                self._views()

            def _views(self) -> None:
                self.keys = self.buffers[0][:, :, self.start:self.used]
                self.values = self.buffers[1][:, :, self.start:self.used]

            def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
                import torch

                n = key_states.shape[-2]
                if self.used + n > self.buffers[0].shape[-2]:
                    grown = [torch.zeros((*b.shape[:2], 2 * (self.used + n), b.shape[-1]), dtype=b.dtype,
                                         device=b.device) for b in self.buffers]
                    for old, new in zip(self.buffers, grown, strict=True):
                        new[:, :, :self.used] = old[:, :, :self.used]
                    self.buffers = (grown[0], grown[1])
                self.buffers[0][:, :, self.used:self.used + n] = key_states
                self.buffers[1][:, :, self.used:self.used + n] = value_states
                self.used += n
                self._views()
                return self.keys, self.values

            def batch_select_indices(self, indices: Any) -> None:
                self.buffers = (self.buffers[0][indices], self.buffers[1][indices])
                self._views()

            def trim_front(self, n: int) -> None:
                self.start += n
                self._views()

        _BUFFER_LAYER = BufferLayer
    return _BUFFER_LAYER


_BUFFER_LAYER: type | None = None


class _Batch:
    """The rows of a batched decode: caches left-padded to one width, at least :data:`MIN_ROWS` rows."""

    def __init__(self, cache: Any, pads: Any, owner: ModelTurns) -> None:
        self.cache, self.pads, self.owner = cache, pads, owner

    @classmethod
    def stack(cls, kvs: list[KV], lengths: list[int], owner: ModelTurns) -> _Batch:
        """Left-pad every row's cache to the longest and stack them (the first row repeated up to MIN_ROWS), in
        buffers with room for the turn's tokens."""
        import torch
        from transformers import DynamicCache

        order = list(range(len(kvs))) + [0] * max(0, MIN_ROWS - len(kvs))
        width = max(lengths)
        cache, layer_class = DynamicCache(config=_inner(owner.model).config), _layer_class()
        layers = []
        for layer in range(len(kvs[0])):
            parts = []
            for part in (0, 1):
                sample = kvs[0][layer][part]
                buffer = torch.zeros((len(order), sample.shape[1], width + owner.max_new_tokens, sample.shape[-1]),
                                     dtype=sample.dtype, device=sample.device)
                for index, row in enumerate(order):
                    buffer[index, :, width - lengths[row]:width] = kvs[row][layer][part][0]
                parts.append(buffer)
            layers.append(layer_class(parts[0], parts[1], width))
        cache.layers = layers
        pads = torch.tensor([width - lengths[row] for row in order])
        return cls(cache, pads, owner)

    @property
    def width(self) -> int:
        return int(self.cache.get_seq_length())

    def row(self, position: int) -> KV:
        """A copy of row ``position``'s cache without its padding."""
        start = int(self.pads[position])
        return [(layer.keys[position:position + 1, :, start:].clone(),
                 layer.values[position:position + 1, :, start:].clone()) for layer in self.cache.layers]

    def select(self, positions: list[int]) -> None:
        """Keep the rows at ``positions`` (the first repeated up to MIN_ROWS); drop padding no row needs."""
        import torch

        index = torch.tensor(positions + [positions[0]] * max(0, MIN_ROWS - len(positions)))
        self.cache.batch_select_indices(index)
        self.pads = self.pads[index]
        trim = int(self.pads.min())
        if trim:
            for layer in self.cache.layers:
                layer.trim_front(trim)
            self.pads = self.pads - trim

    def step(self, tokens: list[int]) -> Any:
        """Run one new token per live row (repeated rows get the first's); return the live rows' logits."""
        import torch

        model = self.owner.model
        device = next(model.parameters()).device
        rows = len(self.pads)
        ids = tokens + [tokens[0]] * (rows - len(tokens))
        width = self.width
        mask = torch.arange(width + 1)[None, :] >= self.pads[:, None]
        positions = (width - self.pads)[:, None]
        output = model(input_ids=torch.tensor(ids, device=device)[:, None], attention_mask=mask.to(device),
                       position_ids=positions.to(device), use_cache=True, **{self.owner.cache_argument: self.cache})
        return output.logits[:len(tokens), -1].float()
