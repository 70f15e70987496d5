"""The command line (argv, environment, working folder, and Gen-3's YAML) of a training run.

One builder per generation, flags by the reference (specforge.md §1):

* Gen-1: ``python -m torch.distributed.run --standalone --nproc_per_node N scripts/train_eagle3_online.py``
  (``train_eagle3_offline.py`` with prepared hidden states);
* Gen-2: the same launcher with ``scripts/train_eagle3.py`` (``--train-hidden-states-path`` makes it
  offline), ``--report-to`` and the tracker's flags;
* Gen-3: ``specforge train --config <output_dir>.yaml`` with the YAML generated from the config (the CLI
  launches its own processes from ``deployment.trainer.nproc_per_node``).

``python -m torch.distributed.run`` is ``torchrun`` run by the training interpreter itself, so the
launcher always belongs to the environment that trains.  A ``module:`` entry (the project's CPU trainer,
``backend.flows.tiny train``) takes the generation's flags and runs as ``python -m MODULE ...`` (through
the launcher only when it needs more than one process).  Flags whose value is SpecForge's default and that
a smaller trainer may not have (``--tp-size 1``) are left out; every other setting is written explicitly.

Resume: Gen-1 and Gen-2 add ``--resume``; Gen-3 adds the override
``training.resume_from=<output_dir>/<run_id>-latest``.

Gen-3's YAML follows SpecForge's loader (``specforge.config.load_config``, checked in the tests against
the release on the package index): online runs are ``deployment.mode: disaggregated`` with
``deployment.disaggregated.backend: mooncake``; the tracker's options go to ``tracking`` under SpecForge's
names.  Whether the SpecForge of a run takes its command is asked before a start
(backend.train.specforge_check).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.filemodes import make_private_dirs, write_private
from backend.train.config import TrainRunConfig, resolve_path

TORCHRUN = ("-m", "torch.distributed.run", "--standalone")
REPO_ROOT = Path(__file__).resolve().parents[2]


class CommandError(ValueError):
    """The run cannot be launched as configured; ``problems`` are ``(field, reason)`` pairs."""

    def __init__(self, name: str, problems: list[tuple[str, str]]):
        self.name = name
        self.problems = problems
        super().__init__("; ".join(f"train {name}: {f}: {why}" if f else f"train {name}: {why}"
                                   for f, why in problems))


@dataclass(frozen=True)
class TrainCommand:
    argv: tuple[str, ...]
    env: dict[str, str]
    cwd: str
    generation: str  # gen1 | gen2 | gen3
    output_dir: str
    yaml_text: str | None = None  # Gen-3: the config file's text
    yaml_path: str | None = None  # Gen-3: where it is written before the start
    notes: tuple[str, ...] = ()
    resume: bool = False

    def write_yaml(self) -> None:
        """Write the Gen-3 YAML (whole, then renamed) where the argv expects it."""
        if self.yaml_text is None or self.yaml_path is None:
            return
        p = Path(self.yaml_path)
        make_private_dirs(p.parent)
        write_private(p, self.yaml_text)


def config_problems(cfg: TrainRunConfig, generation: str | None = None) -> list[tuple[str, str]]:
    """What generation ``generation`` (default: the config's own, when chosen) cannot do with ``cfg``,
    as ``(field, reason)``; nothing for ``auto`` until a generation is known."""
    gen = generation or (cfg.generation if cfg.generation != "auto" else None)
    out: list[tuple[str, str]] = []
    if gen is None:
        return out
    tr = cfg.tracker
    if gen in ("gen1", "gen2"):
        if cfg.capture_servers:
            out.append(("capture_servers", "only Gen-3 online training uses capture servers"))
        if cfg.gen3_yaml:
            out.append(("gen3_yaml", "only Gen-3 reads a YAML config"))
        if cfg.entry_kind == "specforge" and not cfg.specforge_dir:
            out.append(("specforge_dir", f"Gen-{gen[-1]} runs scripts/ of a SpecForge checkout (the wheel has no "
                                         "scripts/): set specforge_dir"))
    if gen == "gen1":
        if cfg.max_steps is not None:
            out.append(("max_steps", "Gen-1 scripts count epochs only (no --max-num-steps); use num_epochs"))
        if tr.report_to != "none":
            out.append(("tracker.report_to", "Gen-1 scripts predate --report-to; use Gen-2 or later, or "
                                             "extra_args"))
    if gen == "gen3":
        if cfg.entry_kind != "specforge":
            out.append(("entry", "Gen-3 is configured by YAML and run by `specforge train`; a module or script "
                                 "entry takes Gen-1/Gen-2 flags"))
        if cfg.tp_size != 1:
            out.append(("tp_size", "Gen-3 keeps training.tp_size at 1: the target's tensor parallelism is set on "
                                   "the capture server (online) or was used to prepare the hidden states "
                                   "(offline)"))
        if cfg.eval_data:
            out.append(("eval_data", "no Gen-3 YAML field for evaluation data is known here; put it in "
                                     "gen3_yaml"))
        data3 = cfg.gen3_yaml.get("data") if isinstance(cfg.gen3_yaml.get("data"), dict) else {}
        if cfg.eval_interval is not None and not data3.get("eval_hidden_states_path"):
            out.append(("eval_interval", "Gen-3 evaluates only offline, from prepared hidden states: set "
                                         "data.eval_hidden_states_path in gen3_yaml with it, or leave eval_interval "
                                         "out (SpecForge's loader refuses one without the other)"))
        online = not cfg.train_hidden_states
        urls = ((cfg.gen3_yaml.get("deployment") or {}).get("disaggregated") or {}).get("server_urls") \
            if isinstance(cfg.gen3_yaml.get("deployment"), dict) else None
        if online and not cfg.capture_servers and not urls:
            out.append(("capture_servers", "Gen-3 online training reads features from a patched SGLang capture "
                                           "server: list its URL (http://host:port), or train offline with "
                                           "train_hidden_states"))
    return out


def _num(x: float) -> str:
    return repr(float(x))


def output_dir_of(cfg: TrainRunConfig, root: Path, outputs_dir: Path) -> str:
    from backend.train.config import default_output_dir

    return resolve_path(cfg.output_dir, root) or str(default_output_dir(outputs_dir, cfg.name))


def gen3_yaml_path(output_dir: str) -> str:
    """The Gen-3 config file: next to the output folder, named after it."""
    p = Path(output_dir)
    return str(p.parent / f"{p.name}.yaml")


def target_path(target: str, root: Path) -> str:
    """The target as SpecForge gets it: a hub id (``meta-llama/Llama-3.1-8B-Instruct``) stays as written; a
    path (absolute, ``./``, ``~``, or a folder that exists under the workspace) is made absolute."""
    if target.startswith(("/", "./", "../", "~")) or (Path(root) / target).exists():
        return resolve_path(target, root) or target
    return target


def spec_flags(cfg: TrainRunConfig, generation: str, root: Path, output_dir: str) -> list[str]:
    """Gen-1/Gen-2 flags of ``cfg``, in the order of the reference's examples."""
    r = lambda p: resolve_path(p, root)  # noqa: E731
    a = ["--target-model-path", target_path(cfg.target_model, root)]
    if cfg.draft_config:
        a += ["--draft-model-config", r(cfg.draft_config)]
    a += ["--train-data-path", r(cfg.train_data)]
    if cfg.train_hidden_states:
        a += ["--train-hidden-states-path", r(cfg.train_hidden_states)]
    if cfg.eval_data:
        a += ["--eval-data-path", r(cfg.eval_data)]
    a += ["--output-dir", output_dir]
    if cfg.chat_template:
        a += ["--chat-template", cfg.chat_template]
    a += ["--num-epochs", str(cfg.num_epochs)]
    if cfg.max_steps is not None:
        a += ["--max-num-steps", str(cfg.max_steps)]
    a += ["--batch-size", str(cfg.batch_size), "--learning-rate", _num(cfg.learning_rate),
          "--max-length", str(cfg.max_length), "--ttt-length", str(cfg.ttt_length)]
    if cfg.tp_size != 1:
        a += ["--tp-size", str(cfg.tp_size)]
    for flag, v in (("--save-interval", cfg.save_interval), ("--eval-interval", cfg.eval_interval),
                    ("--log-interval", cfg.log_interval), ("--seed", cfg.seed)):
        if v is not None:
            a += [flag, str(v)]
    tr = cfg.tracker
    if generation == "gen2" and tr.report_to != "none":
        a += ["--report-to", tr.report_to]
        if tr.report_to == "wandb":
            for flag, v in (("--wandb-project", tr.project), ("--wandb-name", tr.run_name),
                            ("--wandb-dir", resolve_path(tr.wandb_dir, root))):
                if v:
                    a += [flag, v]
            if tr.offline:
                a += ["--wandb-offline"]
        elif tr.report_to == "swanlab":
            for flag, v in (("--swanlab-project", tr.project), ("--swanlab-name", tr.run_name)):
                if v:
                    a += [flag, v]
        elif tr.report_to == "mlflow":
            for flag, v in (("--mlflow-tracking-uri", tr.mlflow_tracking_uri),
                            ("--mlflow-experiment-name", tr.mlflow_experiment_name),
                            ("--mlflow-run-name", tr.run_name)):
                if v:
                    a += [flag, v]
    return a


def gen3_document(cfg: TrainRunConfig, root: Path, output_dir: str) -> dict[str, Any]:
    """The Gen-3 YAML as a dict (schema: reference §1.2), with ``gen3_yaml`` merged over it."""
    r = lambda p: resolve_path(p, root)  # noqa: E731
    model: dict[str, Any] = {"target_model_path": target_path(cfg.target_model, root)}
    if cfg.draft_config:
        model["draft_model_config"] = r(cfg.draft_config)
    data: dict[str, Any] = {}
    if cfg.train_hidden_states:
        data["hidden_states_path"] = r(cfg.train_hidden_states)
    else:
        data["train_data_path"] = r(cfg.train_data)
    data["max_length"] = cfg.max_length
    if cfg.chat_template:
        data["chat_template"] = cfg.chat_template
    training: dict[str, Any] = {"strategy": "eagle3", "num_epochs": cfg.num_epochs}
    if cfg.max_steps is not None:
        training["max_steps"] = cfg.max_steps
    training.update({"batch_size": cfg.batch_size, "learning_rate": float(cfg.learning_rate),
                     "ttt_length": cfg.ttt_length})
    for key, v in (("save_interval", cfg.save_interval), ("eval_interval", cfg.eval_interval),
                   ("log_interval", cfg.log_interval), ("seed", cfg.seed)):
        if v is not None:
            training[key] = v
    deployment: dict[str, Any] = {"mode": "local_colocated" if cfg.train_hidden_states else "disaggregated",
                                  "trainer": {"nnodes": 1, "nproc_per_node": cfg.nproc}}
    if not cfg.train_hidden_states:
        # Online features travel from the capture server through Mooncake: SpecForge's loader requires the
        # backend (since July 2026) and refuses shared_dir for online training.
        deployment["disaggregated"] = {"control_dir": str(Path(output_dir) / "control"),
                                       "consumer_state_dir": str(Path(output_dir) / "consumer-state"),
                                       "backend": "mooncake"}
        if cfg.capture_servers:
            deployment["disaggregated"]["server_urls"] = list(cfg.capture_servers)
    doc = {"model": model, "data": data, "training": training, "tracking": gen3_tracking(cfg, root),
           "run_id": cfg.name, "output_dir": output_dir, "deployment": deployment}
    return _deep_merge(doc, cfg.gen3_yaml)


def gen3_tracking(cfg: TrainRunConfig, root: Path) -> dict[str, Any]:
    """The YAML's ``tracking`` section: ``report_to`` and the back-end's options that the config sets
    (SpecForge's TrackingConfig names them ``wandb_project``, ``swanlab_name``, ``mlflow_run_name``...)."""
    tr = cfg.tracker
    out: dict[str, Any] = {"report_to": tr.report_to}
    if tr.report_to in ("wandb", "swanlab"):
        p = tr.report_to
        for key, v in ((f"{p}_project", tr.project), (f"{p}_name", tr.run_name)):
            if v:
                out[key] = v
        if p == "wandb" and tr.offline:
            out["wandb_offline"] = True
        if p == "wandb" and tr.wandb_dir:
            out["wandb_dir"] = resolve_path(tr.wandb_dir, root)
    elif tr.report_to == "mlflow":
        for key, v in (("mlflow_tracking_uri", tr.mlflow_tracking_uri),
                       ("mlflow_experiment_name", tr.mlflow_experiment_name), ("mlflow_run_name", tr.run_name)):
            if v:
                out[key] = v
    return out


MOONCAKE_ENDPOINTS = (("mooncake_metadata_server", "MOONCAKE_METADATA_SERVER"),
                      ("mooncake_master_server_addr", "MOONCAKE_MASTER_SERVER_ADDR"))


def mooncake_note(cfg: TrainRunConfig, doc: dict[str, Any]) -> str | None:
    """What an online Gen-3 run still needs to reach Mooncake, when neither its YAML nor its environment
    names the endpoints (SpecForge refuses to launch without them)."""
    dis = (doc.get("deployment") or {}).get("disaggregated")
    if not isinstance(dis, dict) or dis.get("backend") != "mooncake" or dis.get("managed_local"):
        return None
    missing = [f"{key} (or {env})" for key, env in MOONCAKE_ENDPOINTS if not dis.get(key) and not cfg.env.get(env)]
    if not missing:
        return None
    return ("Mooncake endpoints not set here: " + ", ".join(missing) + "; SpecForge refuses to launch an online run "
            "unless they are in deployment.disaggregated (gen3_yaml) or in the environment it starts with")


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def build_command(cfg: TrainRunConfig, generation: str | None, *, root: Path, outputs_dir: Path,
                  console_script: str | None = None, resume: bool = False,
                  notes: tuple[str, ...] = ()) -> TrainCommand:
    """The command of ``cfg`` for ``generation``; :class:`CommandError` lists what prevents it."""
    if generation is None:
        raise CommandError(cfg.name, [("generation", "the SpecForge generation is not known: " +
                                       ("; ".join(notes) or "nothing tells") + "; set generation or specforge_dir")])
    problems = config_problems(cfg, generation)
    if problems:
        raise CommandError(cfg.name, problems)
    root = Path(root)
    out_dir = output_dir_of(cfg, root, Path(outputs_dir))
    sf = resolve_path(cfg.specforge_dir, root)
    env: dict[str, str] = {}
    if cfg.gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in cfg.gpus)
    env["PYTHONUNBUFFERED"] = "1"  # log lines reach the file as they are printed
    said = list(notes)
    yaml_text = yaml_path = None
    if generation == "gen3":
        import yaml

        doc = gen3_document(cfg, root, out_dir)
        yaml_text = yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)
        note = mooncake_note(cfg, doc)
        if note:
            said.append(note)
        yaml_path = gen3_yaml_path(out_dir)
        if console_script:
            head = [console_script]
        else:  # the console script was not found: its function, run by the training interpreter
            head = [cfg.python, "-c", "import sys; from specforge.cli import main; sys.argv[0] = 'specforge'; "
                                      "sys.exit(main())"]
        argv = [*head, "train", "--config", yaml_path, *[str(x) for x in cfg.extra_args]]
        if resume:
            argv.append(f"training.resume_from={Path(out_dir) / (cfg.name + '-latest')}")
        tr = cfg.tracker
        if tr.report_to == "mlflow":  # SpecForge's documented environment fallbacks
            for k, v in (("MLFLOW_TRACKING_URI", tr.mlflow_tracking_uri),
                         ("MLFLOW_EXPERIMENT_NAME", tr.mlflow_experiment_name)):
                if v:
                    env[k] = v
        said.append(f"specforge train starts {cfg.nproc} trainer process(es) itself "
                    "(deployment.trainer.nproc_per_node)")
        cwd = cfg.cwd or sf or str(Path(out_dir).parent)
    else:
        flags = spec_flags(cfg, generation, root, out_dir) + [str(x) for x in cfg.extra_args]
        if resume:
            flags.append("--resume")
        kind = cfg.entry_kind
        if kind == "module":
            words = cfg.entry_words
            if cfg.nproc > 1:
                argv = [cfg.python, *TORCHRUN, "--nproc_per_node", str(cfg.nproc), "-m", *words, *flags]
            else:
                argv = [cfg.python, "-m", *words, *flags]
            cwd = cfg.cwd or (str(REPO_ROOT) if words[0].split(".")[0] == "backend" else sf or str(root))
        else:
            if kind == "script":
                script = str(Path(sf or root) / cfg.entry_words[0]) if not Path(
                    cfg.entry_words[0]).expanduser().is_absolute() else str(Path(cfg.entry_words[0]).expanduser())
            elif generation == "gen1":
                script = str(Path(sf) / ("scripts/train_eagle3_offline.py" if cfg.train_hidden_states
                                         else "scripts/train_eagle3_online.py"))
            else:
                script = str(Path(sf) / "scripts/train_eagle3.py")
            argv = [cfg.python, *TORCHRUN, "--nproc_per_node", str(cfg.nproc), script, *flags]
            cwd = cfg.cwd or sf or str(root)
        if cfg.nproc > 1 or kind != "module":
            said.append(f"{cfg.nproc} process(es): data parallel {cfg.nproc // cfg.tp_size} × tensor parallel "
                        f"{cfg.tp_size}")
    if not cfg.draft_config:
        said.append("no draft_config: the draft's config is derived from the target")
    env.update(cfg.env)
    return TrainCommand(argv=tuple(argv), env=env, cwd=resolve_path(cwd, root) or str(root), generation=generation,
                        output_dir=out_dir, yaml_text=yaml_text, yaml_path=yaml_path, notes=tuple(said),
                        resume=resume)


__all__ = ["CommandError", "TrainCommand", "build_command", "config_problems", "gen3_document", "gen3_tracking",
           "gen3_yaml_path", "mooncake_note", "output_dir_of", "spec_flags"]
