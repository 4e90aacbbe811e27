"""Batch and length idioms: padding (tokenizer calls, collators, padding the script writes itself),
packing (SFT's packing=, a token stream cut into fixed blocks, windows at random offsets), max_length and
an encoder-decoder's target length (a tokenizer call, the trainer's keyword or config, the script's own
length argument, a companion script that wrote the data), and the micro-batch of a DataLoader.
"""

from __future__ import annotations

from typing import Any

from memlint.extract.objects import Collator, DataLoader, Dataset, Obj, field_value
from memlint.extract.values import Alts, Const, Dict, Remainder, Unknown, flatten
from memlint.library import api
from memlint.library.defaults import default as library_default
from memlint.plan import Span, Value
from memlint.extract.fields.convert import _Unconvertible, _alts, _bool, _int, _libc


class LengthFields:
    """padding, packing, max_length, target_len, a loop's per_device_batch."""

    def loader_batch(self, line: int | None) -> DataLoader | None:
        """per_device_batch from the training DataLoader (the shuffled one, else the first); the loader."""
        dls = self.facts.first("objects", DataLoader)
        train_dl = _training_loader(self.facts)[0]
        windows = self.facts.first("windows")
        yields = self.facts.first("batch_yields")
        slices = [s for s in self.facts.first("micro_slices") if isinstance(s.rows, Const)]
        fed = [(g.rows, at) for g, at in self.facts.first("generated_batches") if isinstance(g.rows, Const)]
        if fed and not slices and self.hand_loop():  # the loop runs the model on generate()'s output: its rows are the micro-batch
            rows, at = fed[0]
            self.put("per_device_batch", rows.with_value(rows.value, f"the model runs on {rows.value} generated "
                                                                     f"sequences (line {at})"), _int, at)
            return train_dl
        if slices:  # the loop cuts each batch into micro-batches of k rows, a forward and backward each
            self.put("per_device_batch", slices[0].rows.with_value(slices[0].rows.value, slices[0].how), _int, slices[0].line)
            return train_dl
        if train_dl is not None:
            bs = train_dl.get("batch_size")
            if isinstance(bs, Const) and bs.value is None and yields:
                # DataLoader(ds, batch_size=None): no batching of its own, the dataset yields whole batches
                y = yields[0]
                n = y.rows.with_value(y.rows.value, f"DataLoader(batch_size=None) (line {train_dl.line}): the dataset "
                                      f"yields batches of {y.rows.value} rows (`if len(batch) == n: yield`, line {y.line})") \
                    if isinstance(y.rows, Const) else y.rows
                self.put("per_device_batch", n, _int, train_dl.line)
                return train_dl
            self.put("per_device_batch", bs if bs is not None else _libc("torch.utils.data.DataLoader", "batch_size", train_dl.line), _int, train_dl.line)
        elif windows:  # nanoGPT's get_batch: torch.stack([data[i : i + n] for i in torch.randint(_, (B,))])
            self.put("per_device_batch", windows[0].rows, _int, windows[0].line)
        elif self.facts.iterator_batches:  # a checkout iterator class built with its micro-batch size
            rows = self.facts.iterator_batches[0]
            self.put("per_device_batch", rows, _int, rows.line)
        elif self.facts.batch_slices:  # `prompts[j * mb : j * mb + mb]`: the loop's batches cut from a list
            rows = self.facts.batch_slices[0]
            self.put("per_device_batch", rows, _int, rows.line)
        elif yields and isinstance(yields[0].rows, Const):  # a generator of the checkout yielding whole batches
            y = yields[0]
            self.put("per_device_batch", y.rows.with_value(y.rows.value, f"a generator yields batches of {y.rows.value} "
                                                                        f"rows (`if len(batch) == n: yield`, line {y.line})"),
                     _int, y.line)
        elif randoms := self.facts.first("random_batches"):  # torch.randint(vocab_size, (B, T)): random token ids
            self.put("per_device_batch", randoms[-1].rows, _int, randoms[-1].line)  # the last: past any warm-up call
        elif self.facts.train_datasets and not dls:  # `for example in dataset:` with the backward in the body
            at = self.facts.train_datasets[0][1]
            self.put("per_device_batch", Const(1, "literal", at, (f"the training loop (line {at}) takes one example of "
                                                                  "the dataset per step (no DataLoader batches it)",)),
                     _int, at)
        else:
            self.put("per_device_batch", Unknown("no DataLoader found"), line=line)
        return train_dl

    def sft_length(self, a: Obj, trainer: Obj, models: list[Obj], unsloth: bool, sft_field: Any) -> Any:
        """The length an SFT trainer cuts its samples at, from its config `a` (or the trainer's own keyword)."""
        lost = self.lost_field(a, "max_seq_length")  # args.max_seq_length = n where SFTConfig lacks it
        ml = trainer.kwargs.get("max_seq_length", a.get("max_length", None if lost else a.get("max_seq_length")))
        if isinstance(ml, Const) and ml.value is None and ("max_seq_length" in trainer.kwargs or (
                a.get("max_length") is None and not lost)):
            # SFTTrainer(max_seq_length=None) (TRL < 0.20), SFTConfig(max_seq_length=None): the trainer's default
            # length applies (before 0.16 the trainer's min(model_max_length, 1024); 0.16-0.19 a None alias
            # leaves max_length at its default)
            ml = None
        if ml is None and unsloth:
            ml = self.unsloth_length(models)
        if ml is None:
            ml = sft_field(a, "max_length")
            if isinstance(ml, Unknown) and not lost:
                ml = sft_field(a, "max_seq_length")
                d = library_default("trl.SFTConfig", "max_seq_length")
                if isinstance(ml, Const) and ml.value is None and d is not None:  # None: the trainer's default
                    ml = Const(d.value, "library-default", ml.line, ml.chain + (d.why,), ml.file)
        return ml

    def padding_and_length(self, trainer: Obj, arg_objs: list[Obj] | None, models: list[Obj], unsloth: bool) -> None:
        name = trainer.cls
        line = arg_objs[0].line if arg_objs else trainer.line
        data = api.trainer(name).data if api.trainer(name) is not None else "collator"
        skipped = self.skipped_preparation(trainer, arg_objs, name) if data == "sft" else None
        if skipped is not None:  # dataset_kwargs skip_prepare_dataset: the script's collator makes the batches
            data = "collator"
            self.put("packing", Const(False, "literal", skipped.line, (skipped.why,)), _bool, line)
        if data == "sft" or (name in ("Trainer",) and unsloth and arg_objs and arg_objs[0].cls == "trl.SFTConfig"):
            packs, lengths = [], []

            def sft_field(a: Obj, attr: str) -> Any:
                v = field_value(a, attr)
                if isinstance(v, Unknown) and data == "sft" and a.cls.endswith("TrainingArguments"):
                    # SFTTrainer(args=TrainingArguments(...)) rebuilds it as SFTConfig(**args.to_dict()):
                    # the fields TrainingArguments lacks take SFTConfig's defaults
                    d = library_default("trl.SFTConfig", attr)
                    if d is not None:
                        return Const(d.value, "library-default", a.line or None,
                                     (f"{d.why}; {name} turns a TrainingArguments into an SFTConfig",))
                return v

            for a in arg_objs or []:
                p = trainer.kwargs.get("packing", a.get("packing"))
                packs.append(p if p is not None else sft_field(a, "packing"))
                lengths.append(self.sft_length(a, trainer, models, unsloth, sft_field))
            as_is = self.pretokenized(trainer, name, line)
            if as_is is not None:  # the script's own rows of input_ids, taken as they are
                packs, lengths = [as_is[0]], [as_is[1]]
            pack = _alts(packs) if packs else Unknown("packing")
            self.put("packing", pack, _bool, line)
            self.put("max_length", _alts(lengths) if lengths else Unknown("max_length"), _length, line)
            pv = self.fields["packing"]
            if pv.known:
                kinds = [("packing" if p else "longest") for p in (pv.candidates or (pv.value,))]
                why = "packing=True: fixed blocks of max_length" if pv.value else f"{name} pads each batch to its longest sequence"
                self.fields["padding"] = Value(kinds[0], pv.source, pv.span, pv.chain + (why,), tuple(dict.fromkeys(kinds)) if len(set(kinds)) > 1 else ())
            else:
                self.put("padding", Unknown("packing is unknown"), line=line)
            return
        if data in ("preference", "generation"):
            lengths = []
            for a in arg_objs or []:
                if data == "generation":
                    lengths.append(self.generation_length(name, a))
                else:
                    ml = self.trainer_keyword(trainer, "max_length")
                    ml = ml if ml is not None else a.get("max_length")
                    lengths.append(ml if ml is not None else self.trainer_field(name, a, "max_length"))
            if not arg_objs and self.trainer_keyword(trainer, "max_length") is not None:
                lengths.append(self.trainer_keyword(trainer, "max_length"))
            if data == "generation" and not any(isinstance(x, Const) and isinstance(x.value, int) for x in lengths):
                lengths = self.length_argument() or lengths  # untruncated prompts: the script's own cap, where it reads one
            self.put("max_length", _alts(lengths) if lengths else Unknown("max_length"), _length, line)
            self.put("packing", Const(False, "library-default", line, (f"{name} does not pack",)), _bool, line)
            self.put("padding", Const("longest", "library-default", line, (f"{name} pads each batch to its longest sequence",)), line=line)
            return
        collator = trainer.kwargs.get("data_collator")
        has_tok = trainer.kwargs.get("processing_class", trainer.kwargs.get("tokenizer")) is not None
        self.data_padding(collator, has_tok, trainer.line)
        if not self.fields["max_length"].known:
            # a length field of the script's own arguments class counts where something reads it: the checkout's own
            # trainer subclass, or the script (a library Trainer never reads a field it does not declare)
            read = {la.name for la in self.facts.length_args}
            own = self.args_length_field(arg_objs or [], None if getattr(trainer, "user_class", None) else read)
            if own is not None:
                self.put("max_length", own, _length, line)

    def generation_length(self, name: str, a: Obj) -> Any:
        """The longest sequence an on-policy trainer trains on: GRPO's max_prompt_length + max_completion_length (a
        completion budget left from a total whatever the prompt: the total); PPO's prompts are not truncated."""
        if api.trainer(name) is not None and api.trainer(name).objective == "ppo":
            r = a.get("response_length") or field_value(a, "response_length")
            shown = f" + response_length {r.value}" if isinstance(r, Const) else ""
            return Unknown(f"{name} does not truncate prompts: their length is the data's{shown}")
        p = a.get("max_prompt_length") or field_value(a, "max_prompt_length")
        c = a.get("max_completion_length") or field_value(a, "max_completion_length")
        if isinstance(p, Const) and isinstance(c, Const) and isinstance(p.value, int) and isinstance(c.value, int):
            src = c if c.source != "library-default" else p
            return src.with_value(p.value + c.value, f"max_prompt_length {p.value} + max_completion_length {c.value}")
        if isinstance(c, Remainder) and c.part is p:  # completion = total - a data-decided prompt length
            t = c.total
            return t.with_value(t.value, f"max_completion_length = {t.value} - max_prompt_length: prompt and completion "
                                         f"together {t.value}")
        return p if not isinstance(p, Const) or p.value is None else c  # an unknown or untruncated length decides

    def lost_field(self, a: Obj, attr: str) -> bool:
        """`a.attr = v` on a config class that no longer has `attr` at the version read (SFTConfig.max_seq_length from
        TRL 0.20): nothing reads it, said in a note. (As a keyword the class raises TypeError: read as written.)"""
        from memlint.library.versions import in_range, installed_version, shown_version

        gone = api.removed_config_field(a.cls, attr)
        if gone is None or attr not in a.attrs or attr in a.kwargs or not in_range(installed_version(gone[0]), gone[1]):
            return False
        self.notes.append(f"{a.cls.rsplit('.', 1)[-1]}.{attr} is set (line {getattr(a.attrs[attr], 'line', None) or a.line}) "
                          f"but {a.cls} has no {attr} at {shown_version(gone[0])} ({gone[2]}): nothing reads it")
        return True

    @staticmethod
    def skipped_preparation(trainer: Obj, arg_objs: list[Obj] | None, name: str) -> Unknown | None:
        """dataset_kwargs={"skip_prepare_dataset": True} (the trainer's keyword or its config's field, set after
        construction too) at a version that honours it: why, as an Unknown (its line); None otherwise."""
        for holder in [trainer, *(arg_objs or [])]:
            kw = holder.get("dataset_kwargs")
            if not isinstance(kw, Dict):
                continue
            flag = kw.items.get("skip_prepare_dataset")
            if isinstance(flag, Const) and flag.value is True:
                why = api.skips_preparation(name)
                if why is not None:
                    return Unknown(why, flag.line)
        return None

    @staticmethod
    def pretokenized(trainer: Obj, name: str, line: int | None) -> tuple[Any, Any] | None:
        """(packing, max_length) of a trainer handed a dataset the script tokenized itself (`ds.map(tokenize)`),
        at a version that takes it as it is (data/library_api.json pretokenized): no packing, and the length the
        script's tokenizer call truncates at, or none (the longest sample decides); None otherwise."""
        ds = trainer.kwargs.get("train_dataset")
        if not isinstance(ds, Dataset) or not ds.tokenized_by:
            return None
        got = api.pretokenized_as_is(name)
        if got is None or not got[0]:
            return None
        why = got[1]
        calls = [c for c in ds.tokenized_by if c.text]
        own = [x for c in calls for x in _call_lengths(c.kwargs, None, c.tokenizer, c.method)]
        at = ", ".join(str(c.line) for c in calls if c.line)
        if own and len(own) == len(calls):
            length = _alts(own)
        else:
            length = Const(None, "literal", calls[0].line if calls else line,
                           (f"the dataset was tokenized by the script (line {at}) with no truncation", why))
        return Const(False, "library-default", line, (why,)), length

    @staticmethod
    def args_length_field(arg_objs: list[Obj], read: set | None = None) -> Any:
        """A length field the script's own TrainingArguments subclass declares (a checkout GRPOConfig's
        max_seq_len), set in the call, by a later attribute write (`args.max_seq_len = 4096`) or its default:
        the trainer that takes those arguments reads it to cut its sequences. `read`: only the fields among these
        names (those the script reads), None for any (a trainer of the checkout may read any)."""
        for a in arg_objs:
            c = getattr(a, "user_class", None)
            declared: set = set()
            seen = 0
            while c is not None and hasattr(c, "fields") and seen < 20:
                seen += 1
                declared |= set(c.fields)
                nxt = [b for b in c.bases if hasattr(b, "fields")]
                c = nxt[0] if nxt else None
            for name in sorted(declared & api.length_arguments()):
                if read is not None and name not in read:
                    continue
                v = a.get(name)
                v = v if v is not None else field_value(a, name)
                if isinstance(v, Const) and isinstance(v.value, int) and not isinstance(v.value, bool) and v.value > 0:
                    return Const(v.value, v.source, v.line, v.chain + (
                        f"{a.user_class.name}.{name}, a length field of the script's own training arguments class, "
                        "read by the trainer it is given to",), v.file)
        return None

    def trainer_keyword(self, trainer: Obj, key: str) -> Any:
        """A length keyword given to the trainer itself (TRL's DPOTrainer(max_length=1536) beside a
        TrainingArguments; data/library_api.json trainer_length_keywords), or None. The versions that
        accept it decide: a checkout pin outside them rejects the call (a note); unpinned, or a version assumed
        from the file's date, a script that passes it runs on a version that takes it."""
        from memlint.library.versions import checkout_pin, in_range

        v = trainer.kwargs.get(key)
        facts = api.trainer_length_keyword(trainer.cls, key)
        if v is None or facts is None:
            return None
        _field, package, versions, ref = facts
        pin = checkout_pin(package)
        if pin is not None and not in_range(pin.version, versions):
            if pin.dated:  # a version assumed from a date, not pinned: the keyword says the script ran on one that takes it
                self.notes.append(f"{trainer.cls}({key}=...) (line {trainer.line}): {package}{versions} takes it, not "
                                  f"{pin.describe()}; read as the keyword says ({ref})")
            else:
                self.notes.append(f"{trainer.cls}({key}=...) (line {trainer.line}): {pin.describe()} does not take it "
                                  f"({package}{versions} does: {ref}); not read")
                return None
        if isinstance(v, Const) and v.value is None:
            return None  # None: the arguments' value applies (TRL sets args.max_length only from a keyword not None)
        how = f"{trainer.cls}({key}=...) (line {trainer.line}), a keyword {package}{versions} takes ({ref})"
        return v.with_value(v.value, how) if isinstance(v, Const) else v

    def trainer_field(self, name: str, a: Obj, attr: str) -> Any:
        """A field of the trainer's arguments; a TrainingArguments lacks the trainer's own fields
        (max_length): the trainer then falls back to its config class's default."""
        v = field_value(a, attr)
        facts = api.trainer(name)
        if isinstance(v, Const) and v.value is None and facts is not None:
            # None where the trainer falls back to a length of its own at this version (TRL's DPOTrainer before 0.12
            # warned and took 512)
            from memlint.library.defaults import none_fallback

            d = none_fallback(facts.arguments, attr)
            if d is not None:
                return Const(d.value, "library-default", v.line, (*v.chain, d.why), v.file)
        if isinstance(v, Unknown) and facts is not None and a.cls.endswith(".TrainingArguments") \
                and facts.arguments != a.cls:
            d = library_default(facts.arguments, attr)
            if d is not None:
                return Const(d.value, "library-default", a.line or None,
                             (f"{d.why}; {name} given a TrainingArguments falls back to it",))
        return v

    def unsloth_length(self, models: list[Obj]) -> Any:
        for m in models:
            r = self.root(m)
            if r.loader == "unsloth":
                v = r.kwargs.get("max_seq_length")
                return v if v is not None else _libc("unsloth.FastLanguageModel.from_pretrained", "max_seq_length", r.line)
        return None

    def target_length(self, calls: list, line: int | None) -> None:
        """An encoder-decoder's target (labels) length: the max_length of a tokenizer call given text_target=
        (`tokenizer(text_target=..., max_length=N)`, labels alone or with the source), else the script's own
        target-length argument (args.max_target_length, data/library_api.json target_length_arguments)."""
        lengths: list = []
        for entry in calls:
            if "text_target" in entry.kwargs:
                kind = entry.kwargs.get("padding")
                kind = "max_length" if isinstance(kind, Const) and kind.value == "max_length" else None
                lengths += _call_lengths(entry.kwargs, kind, entry.tokenizer, entry.method)
        if not any(isinstance(v, (Const, Alts)) for v in lengths):
            for la in self.facts.first("target_length_args"):
                v = la.value
                if isinstance(v, Const) and isinstance(v.value, int) and not isinstance(v.value, bool) and v.value > 0:
                    lengths = [Const(v.value, v.source, v.line, v.chain + (
                        f"the script's own target-length argument .{la.name} (line {la.line})",), v.file)]
                    break
        if lengths:
            self.put("target_len", _alts(lengths), _length, line)

    def fixed_rows(self, chunking: list, reached_calls: list) -> bool:
        """Rows every one of the same length, no tokenizer padding them: fixed-length blocks of one token stream or
        windows at random offsets of it (packed), or random token ids of a fixed shape (full rows). Whether found."""
        facts = self.facts
        if chunking and (facts.reached.get("chunking", 1) or not facts.reached.get("tokenizer_calls")):
            size, cline = chunking[0].size, chunking[0].line
            self.put("packing", Const(True, "literal", cline, (chunking[0].how,)), _bool, cline)
            self.fields["padding"] = Value("packing", "literal", Span(self.path, cline), ("fixed-length blocks, no padding",))
            self.put("max_length", size, _length, cline)
            return True
        windows = facts.first("windows")
        if windows and not facts.first("objects", DataLoader):
            size, wline = windows[0].size, windows[0].line
            self.put("packing", Const(True, "literal", wline, (windows[0].how,)), _bool, wline)
            self.fields["padding"] = Value("packing", "literal", Span(self.path, wline), ("fixed-length windows, no padding",))
            self.put("max_length", size, _length, wline)
            return True
        randoms = facts.first("random_batches")
        if randoms and not facts.first("objects", DataLoader) and not reached_calls and not facts.first("batch_yields"):
            rb = randoms[-1]
            self.put("packing", Const(False, "literal", rb.line, (rb.how,)), _bool, rb.line)
            self.fields["padding"] = Value("max_length", "literal", Span(self.path, rb.line), (rb.how,))
            self.put("max_length", rb.size, _length, rb.line)
            return True
        return False

    def data_padding(self, collator: Any, tokenizer_given: bool, line: int | None) -> None:
        facts = self.facts
        chunking = facts.first("chunking")
        reached_calls = _data_calls(facts)
        looped, by_loop = _training_loader(facts)
        if by_loop:  # the tokenizer calls of another DataLoader's collate_fn are not the training loop's
            mine = _callbacks(looped.get("collate_fn"))
            theirs = {t for d in facts.objects if isinstance(d, DataLoader) and d is not looped
                      for t in _callbacks(d.get("collate_fn"))} - mine
            other = {id(tc) for a, b, target in facts.handed_calls if id(target) in theirs
                     for tc in facts.tokenizer_calls[a:b]}
            reached_calls = [tc for tc in reached_calls if id(tc) not in other]
        self.target_length(reached_calls, line)
        reached_calls = [c for c in reached_calls if c.text]  # text_target= alone tokenizes the labels only
        if self.fixed_rows(chunking, reached_calls):
            return
        self.put("packing", Const(False, "library-default", line, ("no packing found",)), _bool, line)
        calls = []
        for entry in reached_calls:
            kw, cl, tok = entry.kwargs, entry.line, entry.tokenizer
            t = kw.get("tokenize")
            if isinstance(t, Const) and t.value is False:
                continue
            calls.append((kw, cl, tok, entry.method))
        pads: list = []
        lengths: list = []
        for kw, cl, tok, method in calls:
            p = kw.get("padding")
            kind = None
            if isinstance(p, Const):
                kind = "max_length" if p.value == "max_length" else "longest" if p.value in (True, "longest") else None
            elif p is not None:
                kind = "unknown"
            if kind:
                pads.append((kind, p if isinstance(p, Const) else Unknown("padding"), cl))
            lengths += _call_lengths(kw, kind, tok, method)
        for c in _held_collators(collator) if collator is not None else []:
            if isinstance(c, Collator):
                cname = c.cls.rsplit(".", 1)[-1]
                p = c.get("padding")
                if p is None:
                    p = _libc(c.cls, "padding", c.line) if cname in ("DataCollatorWithPadding", "DataCollatorForSeq2Seq") else Const(True, "library-default", c.line, (f"{cname} pads to the longest in the batch",))
                kind = "max_length" if isinstance(p, Const) and p.value == "max_length" else "longest" if isinstance(p, Const) and p.value in (True, "longest") else None
                if kind:
                    pads.append((kind, p, c.line))
                if c.get("max_length") is not None:
                    lengths.append(c.get("max_length"))
        lengths += facts.first("joined_caps")  # a prompt and a response truncated apart, then joined: the sum
        if self.hand_loop():  # a hand loop runs the model on generate()'s output: prompt + new tokens (the worst case)
            lengths += [g.cap for g, _ in facts.first("generated_batches") if isinstance(g.cap, Const)]
        for hp in facts.first("hand_pads"):
            c = hp.length if isinstance(hp.length, Const) else None
            pads.append((hp.kind, Const(hp.kind, "literal", hp.line, ("padding written in the script's own collate code",), hp.file), hp.line))
            if c is not None:
                lengths.append(c)
        if not pads and collator is None and tokenizer_given:
            pads.append(("longest", Const(True, "library-default", line, ("Trainer pads with DataCollatorWithPadding when given a tokenizer",)), line))
        packed = next((p for p in pads if p[0] == "packing"), None)
        if packed is not None:  # a collate function that concatenates the batch's samples into one row
            self.put("packing", Const(True, "literal", packed[2], ("the collate function concatenates the batch's samples "
                                                                    "into one row",), packed[1].file), _bool, packed[2])
        best = packed or next((p for p in pads if p[0] == "max_length"), None) or next(
            (p for p in pads if p[0] == "longest"), None)
        if best is None:
            self.put("padding", Unknown("no padding found in tokenizer calls or collators"), line=line)
        else:
            kind, src, pl = best
            c = src if isinstance(src, Const) else Const(kind, "literal", pl)
            self.fields["padding"] = Value(kind, c.source, Span(c.file or self.path, c.line or pl or 1), c.chain)
        if not any(isinstance(v, (Const, Alts)) for v in lengths):
            # no length read (none, or only calls whose max_length memlint cannot follow, such as a helper's
            # `max_length=tokenizer.model_max_length` of a tokenizer parameter): the script's own length argument
            lengths = self.length_argument() or self.companion_length() or lengths
        if not lengths and calls and all(_untruncated(kw) for kw, _, _, method in calls if method != "pad"):
            # every call that tokenizes pads but truncates nothing (`processor(text=..., padding=True)`): no cap
            at = ", ".join(str(cl) for _, cl, _, m in calls if cl and m != "pad")
            lengths = [Const(None, "literal", calls[0][1], (f"the tokenizer call at line {at} truncates nothing "
                                                             "(no truncation, no max_length): the longest sample decides",))]
        self.put("max_length", _alts(lengths) if lengths else Unknown("no max_length in tokenizer calls or collators"), _length, line)

    def companion_length(self) -> list:
        """The length a companion script of the checkout wrote the arrays the script loads at (extract/companion.py)."""
        from memlint.extract.companion import written_length

        names = list(dict.fromkeys(n for n, _ in self.facts.array_loads))
        found = written_length(self.script, names) if names else None
        if found is None and names:
            line = self.facts.array_loads[0][1]
            self.notes.append(f"max_length: the script loads pre-tokenized data ({', '.join(names)}, line {line}); no script "
                              "of the checkout memlint read writes it, so the length it was cut to is not known")
        return [found] if found is not None else []

    def hand_loop(self) -> bool:
        """The run is the script's own loop (no library trainer whose data path decides the batches)."""
        t = self.fields.get("trainer")
        return t is None or t.value not in api.trainers()

    def length_argument(self) -> list:
        """The script's own length argument (args.max_seq_length, cfg.cutoff_len) when no tokenizer call
        or collator memlint follows says the length: it caps every sequence wherever it is applied."""
        for la in self.facts.first("length_args"):
            v = la.value
            if isinstance(v, Const) and isinstance(v.value, int) and not isinstance(v.value, bool) and v.value > 0:
                why = (f"the script's own length argument .{la.name} (line {la.line}), read where it is passed on: "
                       "memlint did not follow the data pipeline that applies it (truncation or a length filter)")
                return [Const(v.value, v.source, v.line, v.chain + (why,), v.file)]
        return []


def _training_loader(facts: Any) -> tuple[DataLoader | None, bool]:
    """The DataLoader the training step takes its batches from, and whether a loop with a backward in its body iterates
    it: among the loaders such loops iterate (else all), the shuffled one (a loop shared by training and evaluation),
    else the first."""
    dls = facts.first("objects", DataLoader)
    looped = [d for d in facts.train_loaders if d in dls]
    pool = looped or dls
    return next((d for d in pool if _shuffles(d)), pool[0] if pool else None), bool(looped)


def _callbacks(collate: Any) -> set[int]:
    """The ids of what a DataLoader's collate_fn runs (interp.calls.handed_target of each)."""
    from memlint.extract.interp.calls import handed_target

    return {id(handed_target(x)) for x in flatten(collate)} if collate is not None else set()


def _held_collators(collator: Any) -> list:
    """The collators `collator` stands for: itself, and for an object of the script's own class the library collators
    it holds (`self.inner = DataCollatorWithPadding(tok)`, called from its __call__)."""
    out = []
    for c in flatten(collator):
        out.append(c)
        if not isinstance(c, Collator) and isinstance(c, Obj) and getattr(c, "user_class", None) is not None:
            out.extend(x for v in c.attrs.values() for x in flatten(v) if isinstance(x, Collator))
    return out


def _data_calls(facts: Any) -> list:
    """The tokenizer calls the run reached, those on text written in the script (demonstrations) left out where a
    call on the data (reached or not) says more."""
    reached = [c for c in facts.first("tokenizer_calls") if not c.part]  # a prompt's cap is not the sequence's
    if all(c.literal for c in reached):
        return [c for c in facts.tokenizer_calls if not c.literal and not c.part] or reached
    return [c for c in reached if not c.literal]


def _untruncated(kw: dict) -> bool:
    """A tokenizer call that neither truncates nor names a max_length (truncation absent or False)."""
    trunc = kw.get("truncation")
    return "max_length" not in kw and (trunc is None or (isinstance(trunc, Const) and trunc.value in (False, None)))


def _call_lengths(kw: dict, kind: str | None, tok: Any, method: str) -> list:
    """The lengths one tokenizer call caps its rows at. tokenizer.pad() never truncates: its max_length only
    counts under padding="max_length". max_length=None (or missing) under truncation is the tokenizer's
    model_max_length."""
    trunc = kw.get("truncation")
    ml = kw.get("max_length")
    if method == "pad" and kind != "max_length":
        return []
    if isinstance(trunc, Const) and trunc.value in (False, "do_not_truncate") and kind != "max_length":
        return []  # truncation=False: max_length caps nothing (the tokenizer warns and keeps every token)
    if ml is not None and not all(isinstance(x, Const) and x.value is None for x in flatten(ml)):
        return [ml]
    if (isinstance(trunc, Const) and trunc.value) or kind == "max_length":
        mml = tok.get("model_max_length") if isinstance(tok, Obj) else None
        return [mml if mml is not None else Unknown("the tokenizer's model_max_length (max_length=None truncates there)")]
    return [ml] if ml is not None else []


def _length(v: Any) -> int:
    if v is None:
        raise _Unconvertible("max_length is None: no truncation, the longest sample decides")
    return _int(v)


def _shuffles(dl: Obj) -> bool:
    """A DataLoader that shuffles, as a training one does: shuffle=True, or a RandomSampler, or a DistributedSampler
    whose shuffle is not False (its default is True)."""
    sh = dl.get("shuffle")
    if isinstance(sh, Const) and sh.value:
        return True
    sampler = dl.get("sampler")
    if not isinstance(sampler, Obj):
        return False
    name = sampler.cls.rsplit(".", 1)[-1]
    if name == "RandomSampler":
        return True
    if name == "DistributedSampler":
        s = sampler.get("shuffle")
        return not (isinstance(s, Const) and s.value is False)
    return False
