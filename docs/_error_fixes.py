"""The cause and fix of every error message hpcgpu prints, for the troubleshooting page.

``FIXES`` maps a message's text, exactly as ``_errors.py`` finds it (``…`` where a value is filled in at
run time), to a short reStructuredText paragraph: what makes the check fire, and what to change. The page
(``_generated/errors.rst``) is rendered from it; ``tests/test_docs.py`` fails when a message has no entry
or an entry matches no message. Entries are grouped as ``_errors.GROUPS`` groups them, in its order.
"""

FIXES: dict[str, str] = {
    # -- Training: options --------------------------------------------------------------------------------
    "[rank …] error: …: … …": (
        "Something unexpected went wrong on one rank (the exception type and message follow, then its "
        "traceback): not bad input, which all ranks would have agreed on. The command-line guard prints this "
        "on the failing rank and aborts the whole job with ``MPI_Abort``, so the other ranks do not hang in "
        "their next collective; the launcher then prints its own abort lines and the exit status is 1. Read "
        "the exception first: an out-of-memory error (``MemoryError``, CuPy's ``OutOfMemoryError``) wants a "
        "smaller ``--batch-size`` or fewer ranks per GPU; an error inside your own task function or module is "
        "yours to fix; anything else is a bug: report it with the job's stderr."
    ),
    "…: KeyboardInterrupt on rank …: ending the job now, without saving (exit …)": (
        "A program under ``hpcgpu.run_guarded`` raised ``KeyboardInterrupt`` itself on the rank named (a "
        "callback's, a model's ``forward``, a library that turns a signal into one): not a stop signal, which "
        "the stop policy takes as a request to stop at the next safe point. The other ranks may be waiting in "
        "MPI, so the job is aborted (status 130; the MPI library adds its ``Abort(130)`` line) and nothing is "
        "saved beyond the last checkpoint. Find what raised it on that rank; to stop a run cleanly from your "
        "code, create its stop file or send the process SIGTERM (``os.kill(os.getpid(), signal.SIGTERM)``)."
    ),
    "expected widths like 256,256, got …": (
        "``--hidden`` (of ``python -m hpcgpu.train`` or ``python -m hpcgpu info``) takes comma-separated "
        "integers, and the value given was not that. Write the widths of the hidden layers as "
        "``--hidden 256,256`` (no spaces), or ``--hidden none`` for softmax regression without hidden layers."
    ),
    "widths must be >= 1, got …": (
        "A hidden width given to ``--hidden`` is 0 or negative. Every hidden layer needs at least one unit: "
        "give positive integers (``--hidden 128,64``), or ``--hidden none`` for no hidden layer at all."
    ),
    "…: error: …": (
        "The one line every hpcgpu command prints for bad input (``hpcgpu.train: error: …``, "
        "``hpcgpu.tasks: error: …``, ``hpcgpu: error: …``): all ranks found the same error before any "
        "communication or agreed on it, rank 0 prints it once, and every rank exits with status 2. The text "
        "after ``error:`` is one of the messages on this page; look it up there. A usage error found by the "
        "option parser (an unknown option, a value outside the choices) has the same form and ends in "
        "``(see --help)``."
    ),
    "--batch-size must be >= 1, got …": (
        "``--batch-size`` is the *global* batch (all ranks together) and must be a positive integer. Give "
        "at least the number of data-parallel ranks, e.g. ``--batch-size 256`` for 8 ranks of 32 samples."
    ),
    "--bucket-mb must be > 0, got …": (
        "``--bucket-mb`` is the size of one gradient bucket in MB and must be a positive, finite number. "
        "Leave it at its default (25, as PyTorch DDP), or give a value larger than the whole gradient to "
        "reduce it in a single ``Allreduce`` after the backward pass."
    ),
    "--checkpoint-every must be >= 0, got …": (
        "``--checkpoint-every STEPS`` is a number of global steps between checkpoints; 0 writes a checkpoint "
        "only on a stop request and at the end. Give 0 or a positive integer."
    ),
    "--data-placement must be auto, sharded or replicated, got …": (
        "``TrainConfig(data_placement=...)`` was given another value (the command line's choices catch it "
        "earlier). Use ``sharded`` (1/P of the training set a rank), ``replicated`` (all of it on every "
        "rank) or ``auto``."
    ),
    "--device must be auto, cpu or gpu, got …": (
        "``TrainConfig(device=...)`` was given another value (the command line's choices catch it earlier). "
        "Use ``gpu`` (CuPy, one GPU per rank), ``cpu`` (NumPy) or ``auto`` (the GPU when every rank has a "
        "usable one)."
    ),
    "--dtype must be float32 or float64, got …": (
        "The trainer computes in ``float32`` or ``float64`` only. Give ``--dtype float32`` (the default) or "
        "``--dtype float64``; for 16-bit GEMMs use ``--precision bf16-mixed`` or ``--precision 16-mixed``, "
        "which keep float32 weights."
    ),
    "--epochs must be >= 1, got …": (
        "``--epochs`` is the number of passes over the training set and must be at least 1."
    ),
    "--gemm-threads must be auto or all, got …": (
        "``TrainConfig(gemm_threads=...)`` was given another value (the command line's choices catch it "
        "earlier). Use ``auto`` (each GEMM timed, threads kept where they pay) or ``all``."
    ),
    "--cuda-graphs must be auto or off, got …": (
        "``TrainConfig(cuda_graphs=...)`` was given another value (the command line's choices catch it "
        "earlier). Use ``auto`` (a step's forward and backward passes replayed from a CUDA graph where they "
        "can be captured) or ``off``."
    ),
    "--grad-accum-steps must be a positive divisor of --batch-size …, got …": (
        "With ``--grad-accum-steps K`` each global batch is K micro-batches of ``BATCH_SIZE / K`` samples, so "
        "K must be a positive integer that divides ``--batch-size`` exactly. Choose K among the divisors of "
        "the batch size (for ``--batch-size 512``: 1, 2, 4, 8, ...), or change the batch size."
    ),
    "--hidden widths must be >= 1, got …": (
        "``TrainConfig(hidden=...)`` holds a width below 1. Give positive widths, e.g. ``hidden=(256, 256)``, "
        "or ``()`` for no hidden layer."
    ),
    "--keep-checkpoints must be >= 1, got …": (
        "``--keep-checkpoints K`` keeps the K newest checkpoint files (``PATH``, ``PATH.1``, ...) and must be "
        "at least 1. Keep 2 (the default) so that a damaged newest file still leaves one to resume from."
    ),
    "--lr must be a positive number, got …": (
        "The peak learning rate (of the mean-loss gradient, reached after the warm-up) must be a finite "
        "number above 0. Give e.g. ``--lr 0.1``."
    ),
    "--lr-step-epochs must be >= 1, got …": (
        "With ``--schedule step`` the learning rate is multiplied by ``--lr-gamma`` every "
        "``--lr-step-epochs`` epochs; that interval must be a positive integer."
    ),
    "--momentum must be in [0, 1), got …": (
        "SGD momentum must be at least 0 and below 1 (1 or more never forgets and diverges). Give e.g. "
        "``--momentum 0.9``, or 0 for plain SGD."
    ),
    "--progress: unknown …": (
        "``TrainConfig(progress=...)`` was given another value (the command line's choices catch it "
        "earlier). Use ``auto``, ``bar``, ``lines`` or ``none``."
    ),
    "--schedule: unknown …": (
        "``TrainConfig(schedule=...)`` was given another value (the command line's choices catch it "
        "earlier). Use ``cosine``, ``step`` or ``constant``."
    ),
    "--tensor-parallel must be >= 1, got …": (
        "``--tensor-parallel T`` is the number of ranks that split each layer; 1 (the default) is pure data "
        "parallelism. Give a positive integer that divides the number of ranks."
    ),
    "--warmup-epochs must be >= 0, got …": (
        "The linear warm-up lasts ``--warmup-epochs`` epochs (a fraction is allowed) and cannot be negative. "
        "Give 0 for no warm-up."
    ),
    "--weight-decay must be >= 0, got …": (
        "The L2 coefficient ``--weight-decay`` cannot be negative. Give 0 to switch it off."
    ),
    "--zero-stage must be 0 or 1, got …": (
        "Only ZeRO stage 1 (the optimizer state sharded over the data-parallel ranks) is implemented. Give "
        "``--zero-stage 1`` or ``--zero-stage 0`` (off)."
    ),
    "schedule must be cosine, step or constant, got …": (
        "``LRSchedule(kind=...)`` in library use was given another kind. Use ``\"cosine\"``, ``\"step\"`` or "
        "``\"constant\"``."
    ),
    "--loss must be cross-entropy, mse or huber, got …": (
        "``TrainConfig(loss=...)`` was given another value (the command line's choices catch it earlier). Use "
        "``cross-entropy`` (classification), ``mse`` or ``huber`` (regression), or leave it empty for the "
        "task's default: cross-entropy for classification, mse for regression. In library use with a model, "
        "pass the loss object instead: ``Trainer(model, nn.Huber(), optimizer, ...)``."
    ),
    "--optimizer must be sgd, adam or adamw, got …": (
        "``TrainConfig(optimizer=...)`` was given another value (the command line's choices catch it "
        "earlier). Use ``sgd`` (with ``--momentum``), ``adam`` or ``adamw``. In library use, pass an "
        "optimizer object instead: ``Trainer(model, loss, optim.AdamW(lr=1e-3), ...)``."
    ),
    "--task must be classification or regression, got …": (
        "``TrainConfig(task=...)`` was given another value (the command line's choices catch it earlier). "
        "Use ``classification`` (integer class labels) or ``regression`` (numeric targets), or leave it "
        "empty to take the task from the targets' type: integers are labels, floats regression targets."
    ),
    "optimizer must be one of …, got …": (
        "``hpcgpu.optim.optimizer_by_name(name, ...)`` was given a name it does not know (the command "
        "line's ``--optimizer`` choices catch it earlier). Use ``\"sgd\"``, ``\"adam\"`` or ``\"adamw\"``, or "
        "construct the optimizer yourself (``optim.SGD(...)``, ``optim.Adam(...)``, ``optim.AdamW(...)``) "
        "and pass it to ``Trainer``."
    ),
    "Nesterov momentum needs momentum > 0": (
        "``optim.SGD(nesterov=True)`` was given no momentum: Nesterov's look-ahead follows the velocity, so "
        "without momentum there is nothing to look ahead along. Give a momentum, e.g. "
        "``optim.SGD(lr=0.01, momentum=0.9, nesterov=True)``, or drop ``nesterov``."
    ),
    "… must be …, got …": (
        "An argument of the wrong type or out of its range, named with what it takes: an optimizer's "
        "(``optim.SGD(lr=...)``, ``momentum``, ``weight_decay``; ``optim.Adam(eps=...)``; a learning rate that "
        "is 0, negative, NaN or infinite; a string such as ``lr=\"0.1\"``), or a Trainer option of another type "
        "than its own (``Trainer(batch_size=\"12\")``, ``epochs=2.5``: an integer, a number, a string, True or "
        "False). Give a value of that type and range, e.g. ``optim.SGD(lr=0.01, momentum=0.9)``, "
        "``Trainer(model, loss, batch_size=64, epochs=10)``; on the command line these are ``--lr``, "
        "``--batch-size``..."
    ),
    "betas must be a pair of numbers in [0, 1), got …": (
        "``optim.Adam(betas=...)`` and ``optim.AdamW(betas=...)`` take the decay rates of the first and "
        "second moment estimates, a pair, each at least 0 and below 1 (at 1 the bias correction divides by "
        "zero). Keep the default ``(0.9, 0.999)``, or give two values in that range, e.g. ``betas=(0.9, 0.98)``."
    ),
    "nesterov must be True or False, got …": (
        "``optim.SGD(nesterov=...)`` is a switch. Give ``nesterov=True`` (with a momentum) or leave it out."
    ),
    "… does not define update": (
        "Raised by the base class ``hpcgpu.optim.Optimizer`` when a subclass does not implement ``update``. "
        "An optimizer of your own must define ``update(grad, state, params, *, lr, scale=1.0, count=1)``, "
        "which changes ``params`` and its ``state`` arrays in place from ``scale * grad``; set ``name`` and "
        "``state_names`` (the arrays ``init`` makes), and add its hyperparameters to ``config()`` so that a "
        "checkpoint records them. Or use ``optim.SGD``, ``optim.Adam`` or ``optim.AdamW``."
    ),
    "--precision bf16-mixed needs the ml_dtypes package (pip install ml_dtypes)": (
        "NumPy has no bfloat16 type of its own; hpcgpu takes it from ``ml_dtypes``, which is not installed "
        "in this environment. Run ``pip install ml_dtypes`` in the job's virtual environment (on every node "
        "if it is not shared), or use ``--precision 16-mixed``."
    ),
    "--precision must be one of …, got …": (
        "``TrainConfig(precision=...)`` was given an unknown precision. Use ``64-true``, ``32-true``, "
        "``bf16-mixed`` or ``16-mixed`` (or leave it empty to follow ``--dtype``)."
    ),
    "--precision … keeps … weights, but --dtype is …": (
        "``--precision`` and ``--dtype`` contradict each other: the mixed precisions and ``32-true`` keep "
        "float32 weights, ``64-true`` float64, and ``--dtype`` says the other. Give only one of the two "
        "options (``--dtype`` is an alias of ``--precision 32-true`` / ``64-true``)."
    ),
    "… must be >= 0 seconds, got …": (
        "A timeout (``--stall-timeout``, ``stall_timeout=`` or the environment variable "
        "``HPCGPU_STALL_TIMEOUT``, read when neither is given) is negative or infinite. It must be a finite "
        "number of seconds, 0 or more (0 turns the stall watchdog off). Choose one well above the longest "
        "normal wait in a collective, e.g. ``--stall-timeout 300``, or unset the variable."
    ),
    "… must be seconds, got …": (
        "The environment variable named (``HPCGPU_STALL_TIMEOUT``) is not a number (``300`` is; ``5min`` is "
        "not). Set it to plain seconds, e.g. ``export HPCGPU_STALL_TIMEOUT=300``, or unset it."
    ),
    "hpcgpu: stall: rank … waited … s in …; aborting the job": (
        "The stall watchdog saw this rank wait longer than the stall timeout in the collective named (with "
        "where it was, in parentheses), so it aborted the job instead of letting it hang until the allocation "
        "ends. It is on by default (600 s; ``--stall-timeout``, ``stall_timeout=`` or ``HPCGPU_STALL_TIMEOUT`` "
        "change it, 0 turns it off). This short form comes from a library call's waits (SUMMA, a DistMatrix's "
        "collectives, the agreement of a call's arguments) and wherever the MPI library does not offer "
        "``MPI_THREAD_MULTIPLE``: each rank judges only itself, so the stuck rank is one that is *not* named; a "
        "training run's own watchdog, with thread support, prints ``ranks [...] have not arrived`` from rank "
        "0. Look at what the missing rank was doing (its last lines, an exception it raised alone, I/O on a "
        "slow file system, a dead node), or raise the timeout if the wait was legitimate (see *The job hangs* "
        "above)."
    ),
    "hpcgpu: stall: rank … waited … s for the other ranks at the end of the job; aborting the job": (
        "At the end of a guarded program (``hpcgpu.run_guarded``, and hpcgpu's command lines) the ranks meet "
        "before MPI is finalized; this rank waited there longer than the stall timeout (600 s by default, "
        "``HPCGPU_STALL_TIMEOUT``), so it aborted the job instead of waiting for ever. Another rank left "
        "without coming: one a second SIGINT (Ctrl-C) sent to it alone ended (under MPICH's and Intel MPI's "
        "Hydra such a rank tells the launcher it finalized, so the launcher no longer ends the others), or one "
        "that called ``os._exit`` or was killed. Send a Ctrl-C to the whole job (to ``mpiexec`` or ``srun``, "
        "which forward it to every rank), not to one rank's process."
    ),
    "LAPACK's …: argument … was illegal": (
        "A LAPACK routine (``getrs``, ``geqrf``, ``tpqrt``, ``tpmqrt``, ``ormqr``) refused an argument hpcgpu "
        "gave it: a bug in hpcgpu, not in your input (the matrix's shape and values are checked before it is "
        "called). Please report it with the routine, the matrix's shape and dtype and the number of ranks."
    ),
    "…: … differs across ranks: …": (
        "The ranks called one collective function (``Trainer(...)``, ``fit``, ``evaluate``, ``predict``, "
        "``DistMatrix.random``, ``matmul``, ``tasks.map``...) with different values of the argument named: "
        "each value is listed with the ranks that gave it. An SPMD program must give every rank the same "
        "arguments (a per-rank seed used by mistake, a config read from a rank-local path, a rank-dependent "
        "branch). Arrays are compared by shape and dtype, not contents; a nested name (``optimizer.lr``) is "
        "the part of the object that differs. Every rank raises this, before any other communication: fix "
        "the script so that the named argument is the same everywhere (sharded data: ``sharded=True``)."
    ),
    "--clip-grad-norm must be a positive number, got …": (
        "``--clip-grad-norm`` (``clip_grad_norm=``) is the largest global L2 norm of the averaged gradient; "
        "0, a negative number, infinity or NaN bounds nothing. Give a positive number (1.0 is common), or "
        "leave it out for no clipping."
    ),
    "--clip-grad-value must be a positive number, got …": (
        "``--clip-grad-value`` (``clip_grad_value=``) is the largest magnitude of each element of the averaged "
        "gradient. Give a positive number, or leave it out for no clipping."
    ),
    "--clip-grad-norm and --clip-grad-value: give one of them": (
        "Both clippings were asked for; a run clips by the global norm or by each element's value, not both "
        "(Lightning's ``gradient_clip_algorithm``). Keep one."
    ),
    "--clip-grad-norm does not combine with --tensor-parallel; --clip-grad-value does": (
        "Under tensor parallelism each rank holds a slice of some layers and the whole of others, so the "
        "global norm is not computed yet. Clip by value (``--clip-grad-value``), which is per element, or "
        "train without tensor parallelism."
    ),
    "optimizer must be an hpcgpu.optim optimizer (SGD, Adam, AdamW) or torch.optim.SGD, Adam or AdamW, got "
    "torch.optim.…": (
        "hpcgpu steps PyTorch's SGD, Adam and AdamW on its buffers and checkpoints their state, which it lays "
        "out like the parameters; other ``torch.optim`` classes keep state it does not know. Use one of those "
        "three, or hpcgpu.optim's SGD, Adam or AdamW."
    ),
    "scheduler must be a torch.optim.lr_scheduler of the optimizer given as optimizer=": (
        "``scheduler=`` was built on another optimizer than the one given as ``optimizer=`` (or is not a "
        "scheduler): it would step a rate nothing uses. Build it on the same optimizer: "
        "``torch.optim.lr_scheduler.StepLR(opt, ...)`` with ``Trainer(..., optimizer=opt, scheduler=...)``."
    ),
    "scheduler: a torch.optim.lr_scheduler steps a torch.optim optimizer given as optimizer=; hpcgpu's "
    "optimizers follow schedule= (cosine, step, constant)": (
        "A PyTorch scheduler was given without a PyTorch optimizer. With hpcgpu's optimizers choose the "
        "learning-rate schedule by ``schedule=`` (``warmup_epochs``, ``lr_step_epochs``, ``lr_gamma``); "
        "with ``torch.optim`` give both."
    ),
    "scheduler_interval must be epoch or step, got …": (
        "``scheduler_interval`` says when the PyTorch scheduler steps: ``\"epoch\"`` (after each epoch, the "
        "default) or ``\"step\"`` (after each global step), as Lightning's ``interval``."
    ),
    # -- Training: data -----------------------------------------------------------------------------------
    "the epoch's last, partial step (… samples, drop_last=False), on rank … (… rows): …": (
        "Without ``drop_last`` each epoch ends with a smaller step of the last ``N mod B`` samples, split over the "
        "ranks, and the model refused that rank's few rows (after the colon, the model's own words): PyTorch's "
        "BatchNorm, for one, refuses a training batch of a single row. Keep ``drop_last`` (the default), or "
        "choose a batch size that leaves no remainder or at least two rows a rank (and a micro-batch)."
    ),
    "drop_last=…: must be True or False": (
        "``GlobalBatchSampler`` was given a ``drop_last`` that is not a bool. True (the default) leaves the "
        "last ``N mod B`` samples of each epoch's order out of it; False trains them as a last, smaller step."
    ),
    ("--no-drop-last with --sync-batchnorm: the last step's … samples… leave a rank without a row, and "
     "SyncBatchNorm's statistics need every rank's: use --drop-last, or a --batch-size that leaves at least … "
     "samples (or none) for the last step"): (
        "Without ``drop_last`` the epoch's last step trains the last ``N mod B`` samples, each of its K "
        "micro-batches split among the ranks; here a micro-batch has fewer samples than there are ranks, so a "
        "rank would skip the forward pass in which SyncBatchNorm sums its statistics over every rank. Keep "
        "``drop_last`` (the default), or choose a batch size that leaves no remainder or at least K x the "
        "number of ranks."
    ),
    "bundled data set: cannot write … (…)": (
        "Rank 0 could not write the bundled data set (the digits, or Fashion-MNIST) to its cache, "
        "``$HPCGPU_DATA_DIR`` (default ``~/.cache/hpcgpu``), before training: the directory is not writable, "
        "the disk is full, or scikit-learn is missing for the digits. Point ``HPCGPU_DATA_DIR`` at a "
        "directory you can write in, install the ``data`` extra (``pip install -e '.[data]'`` in the clone of "
        "hpcgpu), or pass ``--data FILE`` with your own HDF5 file."
    ),
    "the digits data set needs scikit-learn: pip install scikit-learn (or pass --data FILE)": (
        "Without ``--data`` the trainer uses scikit-learn's handwritten digits, written once to "
        "``$HPCGPU_DATA_DIR`` (default ``~/.cache/hpcgpu``), and scikit-learn is not installed. Install it "
        "with the ``data`` extra (``pip install -e '.[data]'`` in the clone of hpcgpu, or "
        "``pip install scikit-learn``), or train on your own file with ``--data FILE.h5``. The trainer "
        "reports it as ``bundled data set: cannot write …`` followed by this text."
    ),
    "unknown data set …; choose from …": (
        "``hpcgpu.datasets.write`` was asked for a data set it does not know. The names are ``digits`` and "
        "``fashion-mnist``."
    ),
    "…: no …[.gz] (Fashion-MNIST IDX files)": (
        "``python -m hpcgpu.datasets fashion-mnist`` looks for the four official IDX files "
        "(``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte``, "
        "``t10k-labels-idx1-ubyte``, each optionally ``.gz``) in the source directory, and one is missing. "
        "Install Debian's ``dataset-fashion-mnist`` (``/usr/share/datasets/fashion-mnist``), or download the "
        "files and pass their directory with ``--source DIR``."
    ),
    "…: not an IDX file": (
        "The file does not start with an IDX magic number (two zero bytes): it is not an MNIST-style IDX "
        "file, or a gzipped one without the ``.gz`` suffix, or an HTML error page saved by a failed "
        "download. Download the file again; name a gzipped file ``….gz``."
    ),
    "…: truncated IDX file": (
        "The IDX header announces more values than the file holds: the download or copy was cut short. "
        "Download the file again and check its size or checksum."
    ),
    "…: unknown IDX type code …": (
        "The IDX header's type byte is none of the six the format defines (uint8, int8, int16, int32, "
        "float32, float64): the file is damaged or not IDX. Download it again."
    ),
    "--data …: /… has … samples, fewer than the … ranks (each rank needs at least one)": (
        "Each data-parallel rank reads a shard of the training set and needs at least one row, but the "
        "file's ``/train`` has fewer rows than ranks. Run on fewer ranks (``mpiexec -n`` or Slurm's "
        "``--ntasks``), or use a larger training set."
    ),
    "… row … holds NaN or infinity": (
        "Every rank checks its rows before training; the row named (a global row index) of the features, or "
        "of regression targets, holds a NaN or an infinite value, which would make the loss NaN at once. The "
        "prefix says which data: ``--data FILE: /train/X`` for a file, ``data: X``, ``validation: y`` or "
        "``predict: X`` for arrays given to ``fit``, ``evaluate`` or ``predict``. Clean or impute the data "
        "(drop or fill that row), then write the file again or pass the cleaned arrays."
    ),
    "… has a negative label (…)": (
        "Labels must be class indices ``0 .. C-1``, and the labels named (``--data FILE: /train/y`` of a "
        "file, ``data: y`` or ``validation: y`` of arrays) hold a negative one. Map your classes to 0-based "
        "integers (e.g. with ``numpy.unique(y, return_inverse=True)``), then write the file again or pass "
        "the mapped labels."
    ),
    "…: label … is outside 0..… (num_classes = …)": (
        "A label is C or larger, C being the number of classes: on the command line the file's "
        "``num_classes`` attribute (or else the largest label plus one); with a model given to ``Trainer``, "
        "the number of outputs of its last ``Dense`` layer. Give the last layer one output per class "
        "(``nn.Dense(h, C)``), fix the attribute with ``h5py`` (``f.attrs[\"num_classes\"] = C``, or delete it), "
        "or map the labels to ``0 .. C-1``."
    ),
    "--data …: no dataset …": (
        "The trainer reads ``/train/X`` (N x D features) and ``/train/y`` (N labels or regression targets), "
        "optionally ``/test/X`` and ``/test/y``; the dataset named is missing (or is a group). Write the file "
        "in that layout (``python -m hpcgpu.datasets`` shows one), or rename the datasets with ``h5py``. A "
        "``/test`` with only one of its two datasets is also an error."
    ),
    "--data …: rank … cannot read /… rows …:… (…)": (
        "This rank could open the file but not read its shard; the HDF5 reason follows. Usual causes: the "
        "file is on a file system that this rank's node sees differently (put it on a shared one), it was "
        "changed or truncated while the job started, or HDF5 file locking fails on a parallel file system "
        "(then set ``HDF5_USE_FILE_LOCKING=FALSE``). All ranks stop with this message."
    ),
    "…: … class(es); classification needs at least 2": (
        "There are fewer than two classes, so there is nothing to classify: on the command line the labels "
        "(or the file's ``num_classes`` attribute) give one; with a model given to ``Trainer``, its last "
        "``Dense`` layer has a single output. Check that ``/train/y`` (or ``y``) holds the labels you meant, "
        "fix ``num_classes``, or give the last layer one output per class; for a single score per sample use "
        "a regression loss (``nn.MeanSquaredError()``) with float targets."
    ),
    "--data …: … has no features (D = 0)": (
        "``/train/X`` (or ``/test/X``) has shape N x 0. Write the features as a 2-D array with at least one "
        "column."
    ),
    "--data …: … has … rows but … has … labels": (
        "``X`` and ``y`` of one split differ in length: every row of features needs exactly one label. "
        "Write both from the same selection of samples."
    ),
    "--data …: … must be 2-D (N x D), has shape …": (
        "The features must be one row per sample. Reshape images before writing, e.g. "
        "``X.reshape(len(X), -1)`` turns N x 28 x 28 into N x 784."
    ),
    "--data …: … must be a 1-D integer label array for classification, has shape … and dtype …": (
        "For classification (``--task classification``, or by default when the targets are integers or not "
        "numbers) ``y`` must be a 1-D integer array of class indices, not one-hot rows, floats or strings. "
        "Write ``y.argmax(axis=1)`` for one-hot labels, ``y.astype(\"int64\")`` for integral floats, or map "
        "strings to indices; for numeric targets to fit, give ``--task regression``."
    ),
    "--data …: … must be numbers of shape (N,) or (N, k) for regression, has shape … and dtype …": (
        "For regression (``--task regression``, or by default when the targets are floats) ``y`` must hold "
        "one number per sample, shape (N,), or k numbers per sample, shape (N, k); this dataset has more "
        "dimensions or is not numeric. Write it as a float array of shape (N,) or (N, k) "
        "(``y.reshape(len(y), -1)``); for class labels, store integers and give ``--task classification``."
    ),
    "--data …: … must be real numbers, has dtype …": (
        "The features must be integers or floats (they are converted to ``--dtype``); the dataset holds "
        "strings, booleans, complex numbers or a compound type. Convert them to a numeric array before "
        "writing."
    ),
    "--data-placement replicated: no room for the training set (… MiB) on rank …; use --data-placement sharded": (
        "With ``replicated`` every rank holds the whole training set in host memory, and this rank could "
        "not allocate it (the size is named). Use ``--data-placement sharded`` (1/P of the set a rank, rows "
        "exchanged every epoch), or ``auto``, which replicates only small sets, or fewer ranks per node."
    ),
    "a sampler of … cannot continue as …": (
        "``GlobalBatchSampler.load_state_dict`` (library use) was given the state of a sampler with another "
        "seed, global batch size or number of micro-batches: its sample order would differ. Build the "
        "sampler with the same ``seed``, ``batch_size`` and ``micro_batches`` as the saved one."
    ),
    "sampler: pool index out of range […, …]": (
        "An internal consistency check of the sampler failed: an epoch's rows do not fit the pool it "
        "received. No input should cause it; please report it with the job's stderr and the options used."
    ),
    "training data on the GPU of rank …: …": (
        "Copying the rank's training rows to its GPU failed, usually CuPy's out-of-memory error (quoted). "
        "With ``--data-placement replicated`` (the message then says so) use ``sharded``; otherwise check "
        "that ranks do not share a GPU (``python -m hpcgpu info``), that no other process holds its memory "
        "(``nvidia-smi``), or run more ranks so that each holds less."
    ),
    "…: … must be arrays (or h5py datasets) with a shape (…)": (
        "``hpcgpu.train.data.from_arrays`` takes arrays that have a ``shape`` and a ``dtype``: NumPy or CuPy "
        "arrays, or h5py datasets (each rank then reads only its rows). ``fit``, ``evaluate`` and ``predict`` "
        "read lists as arrays first; called directly, pass ``numpy.asarray(X)`` and ``numpy.asarray(y)``."
    ),
    "…: … cannot be read as arrays (…)": (
        "``fit((X, y))``, ``evaluate((X, y))`` and ``predict(X)`` take arrays (NumPy or CuPy, h5py datasets, "
        "frames with ``shape``) or lists that NumPy reads as arrays (``numpy.asarray``): every row of ``X`` "
        "the same length. A ragged list (rows of different lengths) is none: pad or select the rows, or "
        "pass ``numpy.asarray(X)`` of the rows you mean (``df.to_numpy()`` for pandas)."
    ),
    "…: X has … rows but y has shape …": (
        "``X`` and ``y`` of one data set differ in length (or ``y`` has no length at all): every row of "
        "features needs one target. Pass both from the same selection of samples; with ``sharded=True`` each "
        "rank's ``X`` and ``y`` must be its own rows of both."
    ),
    "…: X must be 2-D (N x D) with D > 0, has shape …": (
        "Features given to ``fit``, ``evaluate`` or ``predict`` (arrays, or the dataset of "
        "``predict(\"FILE:DATASET\")``) must be one row per sample with at least one column. Flatten images "
        "first (``X.reshape(len(X), -1)``), and give a single feature as a column (``x[:, None]``)."
    ),
    "…: y must be 1-D integer labels for classification (or whole-number floats), has shape … and kind …": (
        "For a classification model (a ``Sequential`` with ``nn.SoftmaxCrossEntropy``, or "
        "``task=\"classification\"``) the targets must be one class index per sample: integers, or floats "
        "that are whole numbers (``0.0``, ``1.0``); ``kind`` is NumPy's dtype kind (``U`` string, ``O`` "
        "object, ``c`` complex). Convert one-hot rows with ``y.argmax(axis=1)`` and string classes with "
        "``numpy.unique(y, return_inverse=True)[1]``; for continuous targets use a regression loss "
        "(``nn.MeanSquaredError()``, ``nn.Huber()``)."
    ),
    "…: y must be numbers of shape (N,) or (N, k) for regression, has shape …": (
        "For a regression model (``nn.MeanSquaredError``, ``nn.Huber``, or a model of one's own with float "
        "targets) the targets must be numbers, one per sample (N,) or k per sample (N, k). Reshape them "
        "(``y.reshape(len(y), -1)``) and convert strings to numbers; for class labels use "
        "``nn.SoftmaxCrossEntropy`` with integer labels."
    ),
    "…: the ranks hold data of different shapes or tasks (…)": (
        "Every rank must pass data with the same number of features, the same targets per sample and the "
        "same task (integer labels, or numeric targets); what each rank passed (features, target shape, "
        "task) follows. Load the same data on every rank; with ``sharded=True``, prepare every rank's part "
        "alike (the same columns, labels of an integer type on every rank)."
    ),
    (
        "…: rank 0 holds … rows and rank … …: with sharded=False every rank passes the whole set; pass "
        "sharded=True when each passes its own rows"
    ): (
        "With ``sharded=False`` (the default) ``fit``, ``evaluate`` and ``predict`` expect the whole data set "
        "on every rank, each rank taking its block of it; here the ranks passed arrays of different lengths, "
        "so they do not hold the same set. If each rank loaded its own part, pass ``sharded=True`` (the set "
        "is then the ranks' rows in rank order); otherwise make every rank load the same full set (the same "
        "file, preprocessing and seed)."
    ),
    "…: X must hold real numbers, has dtype …": (
        "Features given to ``fit``, ``evaluate`` or ``predict`` must be real numbers (integers, floats, "
        "booleans, or objects that are numbers): complex values would lose their imaginary part, and strings "
        "cannot be converted. Give real features, e.g. ``numpy.column_stack([z.real, z.imag])`` for complex "
        "ones, and encode categories as numbers first."
    ),
    "warning: … … exists already: the run stops after its first step (remove it before starting; the job "
    "scripts run rm -f on it)": (
        "The stop file was there when the run started: left from an earlier stop, most often. A run stops as "
        "soon as its stop file appears, so this one stops after its first step, writes its checkpoint and "
        "exits 3, and the stop's line then says to remove the file before the rerun. Remove it (``rm -f "
        "STOP``) before starting; the job scripts in ``jobs/slurm/`` do this before every start and requeue."
    ),
    "… …: not a file path (…)": (
        "The stop file (``stop_file=`` of the Trainer or of ``hpcgpu.tasks.map``) is not a path: a number, or "
        "a string with a NUL byte. Give the path of a file that does not exist yet, e.g. ``stop_file=\"STOP\"``."
    ),
    "… …: is the run's … file: a stop file needs a path of its own": (
        "The stop file (``--stop-file`` of ``python -m hpcgpu.train`` and ``python -m hpcgpu.tasks``, "
        "``stop_file=`` of the Trainer and of ``hpcgpu.tasks.map``) names the run's data, parameter table, "
        "output or checkpoint file. A run stops when its stop file appears, so an existing one stops it at "
        "once, and the stop's advice would be to remove it. Give the stop file a path of its own (the job "
        "scripts use ``$RUN_DIR/STOP``)."
    ),
    "…: X has no rows": (
        "``predict`` was given zero rows (an empty selection): there are no outputs to return, and every rank "
        "says so alike. Check the selection before calling it (``if len(X): ...``)."
    ),
    "…: no samples": (
        "The data given to ``fit`` or ``evaluate`` has no rows at all (an empty selection or file). Check "
        "what was selected before training."
    ),
    "…: … samples, fewer than the … ranks (each rank needs at least one)": (
        "The training data given to ``fit`` has fewer rows than there are data-parallel ranks, and each rank "
        "needs at least one. Run on fewer ranks, or train on more data."
    ),
    "…: rank … cannot take rows …:… (…: …)": (
        "The rank named could not copy its rows of the arrays given into its own float arrays (the error "
        "follows): usually out of memory (``MemoryError``), values that cannot be converted to numbers "
        "(strings, objects), or an h5py dataset that rank's node cannot read. Free memory or run more ranks "
        "(with ``sharded=True`` each rank holds only its own rows), convert the data to numbers, or put the "
        "file on a file system every node shares."
    ),
    # -- Training: checkpoints, resume and divergence -----------------------------------------------------
    "checkpoint …: unreadable (…)": (
        "A checkpoint file exists but could not be read: not HDF5, truncated (e.g. a disk that filled up), or "
        "missing a field. It is reported inside ``--resume: no readable checkpoint: …`` or as a warning "
        "while ``--resume`` falls back to an older file. Move the file aside; the older checkpoints "
        "(``PATH.1``, ...) are used."
    ),
    "checkpoint …: …": (
        "A checkpoint was rejected for the reason that follows (not an hpcgpu checkpoint, written for a "
        "model of another size, a malformed attribute). It appears within ``--resume: no readable "
        "checkpoint`` or in a *falling back* warning; see the entry of the reason."
    ),
    "its attributes fail their checksum (changed or damaged since it was written)": (
        "Every checkpoint carries a SHA-256 of its attributes (epoch, step, options, ...) and of each of its "
        "arrays. This file's attributes no longer match: it was changed after it was written (by a program "
        "that opened it for writing) or damaged on disk. ``--resume`` skips it and falls back to the older "
        "checkpoint (``PATH.1``, ...); move the damaged file aside, and check the file system if it recurs."
    ),
    "… fail… its checksum (changed or damaged since it was written)": (
        "The arrays named (``params``, ``optimizer/velocity``, ...) no longer match the SHA-256 written "
        "beside them: the file was damaged on disk or altered after it was written. A checkpoint that fails "
        "its checksum is never resumed: ``--resume`` falls back to the older one (``PATH.1``, ...), losing "
        "the steps in between. Move the damaged file aside, and check the file system if it recurs."
    ),
    "its state has no progress or precision part": (
        "A checkpoint of this format (3) holds each part's state in its ``state`` attribute; this one has no "
        "``progress`` or ``precision`` part, so it was not written by hpcgpu's trainer (or was edited). "
        "``--resume`` falls back to the older checkpoint; move the file aside."
    ),
    "… in a part's state: not an array, a number, a string, a list or a dict": (
        "A part of the trainer (a model of one's own's buffers, a callback's state) gave its ``state_dict`` a "
        "value a checkpoint cannot hold. Give arrays (NumPy or CuPy), numbers, strings, and lists or dicts of "
        "those; nothing was written, and the older checkpoints are untouched."
    ),
    "… holds NaN or infinity (damaged: a checkpoint is never written so)": (
        "The trainer refuses to write a checkpoint whose parameters are not finite, so a file holding NaN or "
        "infinity was damaged afterwards (an older file, written before checksums, is checked this way "
        "too). ``--resume`` falls back to the older checkpoint; move the damaged file aside."
    ),
    "… data with a /test split, --data … has none": (
        "A checkpoint records a fingerprint of the training and test data it was trained on. The run that "
        "wrote it had a ``/test`` split and this ``--data`` has none: it is another file. Resume with the "
        "data the checkpoint was trained on, or start a new run (without ``--resume``, or with another "
        "``--checkpoint``)."
    ),
    "… data with … …, --data … has …: resume with the data it was trained on, or start afresh": (
        "The checkpoint was trained on data with another number of features or samples than this "
        "``--data`` (both are named): resuming would train on other data without a word. Give the "
        "``--data`` the checkpoint was trained on (the results file's ``data`` attribute names it), or start "
        "a new run without ``--resume``."
    ),
    (
        "… other data (/… fingerprint …, --data … has …: the same shape, other values): resume with the data "
        "it was trained on, or start afresh without --resume"
    ): (
        "The data has the checkpoint's shape but other values: its fingerprint (a hash of every row, "
        "features and labels, the same at any number of ranks) differs. Another file, or the same file "
        "rewritten (other preprocessing, another shuffle). Resume with the data the checkpoint was trained "
        "on, or start a new run without ``--resume``."
    ),
    "loss must be an hpcgpu.nn loss (SoftmaxCrossEntropy, MeanSquaredError, Huber), got …": (
        "``Trainer(model, loss, optimizer)`` takes the loss second: an object of :mod:`hpcgpu.nn`'s losses. "
        "When the message goes on with *give the optimizer as optimizer=*, an optimizer was passed in the "
        "loss's place: write ``Trainer(model, nn.MeanSquaredError(), optim.Adam(...))`` or name it, "
        "``optimizer=optim.Adam(...)``."
    ),
    "model … is a layer: give a Sequential of layers, Sequential(…(...))": (
        "A single layer is not a model: the trainer runs a :class:`hpcgpu.nn.Sequential` of layers with a loss. "
        "Wrap it, ``Trainer(nn.Sequential(nn.Dense(4, 1)), nn.MeanSquaredError())``."
    ),
    "--data …: /… cannot be read (…)": (
        "HDF5 could not open the split's datasets: a damaged object header (the file was cut or overwritten in "
        "place), an external link to a file that is not there, or a dataset of a type h5py cannot read; the "
        "library's words follow in parentheses. Check the file with ``h5ls -r FILE`` or ``h5dump -H FILE``, "
        "restore it from where it came, or give the external link's target file beside it."
    ),
    (
        "--data …: /…/X declares … x … (… GiB in all); this node's ranks would hold … GiB of it, more than its "
        "memory (… GiB): run on more nodes, or check the file's declared size"
    ): (
        "Before reading any row, each node adds up the shards its ranks would hold and compares the sum with "
        "its memory (or the job's cgroup limit). The dataset's declared size is too large for it: run on more "
        "nodes (each holds a smaller share), or, when the file cannot really hold that much, fix the writer: "
        "a dataset created larger than what was written reads its unwritten chunks as zeros."
    ),
    "--data …: /…/X row … holds …, beyond …'s range (…): use --dtype float64, or rescale the features": (
        "The file stores that value finitely in a wider type, but it overflows the training type (float32 "
        "holds magnitudes up to 3.4e38): reading it would give infinity. Train in float64 (``--dtype "
        "float64``), or scale the features to a sensible range (standardize them) before writing the file."
    ),
    (
        "hpcgpu.train: warning: --data …: … declares … rows but only … of its … chunks were ever written: the "
        "rest read as … (the fill value)"
    ): (
        "Not an error: the dataset was created with more rows than were ever written (a writer that stopped "
        "early, or preallocated space), so HDF5 reads the missing chunks as the fill value, and the trainer "
        "trains on those rows too. If that is not meant, rewrite the file with only the rows you have (or "
        "resize the dataset: ``dset.resize(n, axis=0)``)."
    ),
    (
        "… needs … GiB (parameters, gradient and optimizer state of … parameters on each of this node's ranks), "
        "more than … has (… GiB)…"
    ): (
        "Checked before anything is allocated: the model, with its gradient, its optimizer's state and (mixed "
        "precision) a 16-bit copy, does not fit in the memory of the node (or of the GPU). With labels, a last "
        "layer of billions of outputs usually means a stray label (the classes are the largest label + 1): "
        "relabel them ``0..C-1`` (``numpy.unique(y, return_inverse=True)``) or give ``num_classes``. "
        "Otherwise use smaller layers, tensor parallelism (``--tensor-parallel``), or ZeRO-1 for the optimizer "
        "state."
    ),
    "holds … parameters, the model has …": (
        "The checkpoint is for a model of another size: other ``--hidden`` widths, or a data set with another "
        "number of features or classes. Resume with the model and data of the run that wrote it, or start a "
        "new run under another ``--checkpoint`` path (or without ``--resume``)."
    ),
    "checkpoint format …; this hpcgpu reads format … only": (
        "The checkpoint was written in another format than this hpcgpu's (format 1, before checksums and named "
        "optimizer state, is no longer read; hpcgpu has had no release that wrote it). The file is skipped as "
        "damaged and an older kept checkpoint is tried; with none, train afresh without ``--resume``."
    ),
    "fit: epochs=… must be a whole number of epochs in all, at least 1 and the … done": (
        "``fit(epochs=N)`` trains until N epochs in all (not N more): give a number at least as large as "
        "``trainer.epoch``, the epochs done (``fit(epochs=trainer.epoch + 5)`` for five more)."
    ),
    ("fit: this Trainer trains on the data of its first fit; call fit() without data to go on (fit(epochs=N) to "
     "train further), or make a new Trainer"): (
        "A Trainer is bound to the data of its first ``fit`` (its sampler, sizes and checks are built for it). "
        "To train further on it call ``fit()`` or ``fit(epochs=N)``; to train on other data, make a new "
        "Trainer for it."
    ),
    "--resume needs --checkpoint (or --out, beside which it looks for OUT.ckpt.h5)": (
        "A resume needs the checkpoint to continue from: give ``--checkpoint PATH`` (``checkpoint=PATH`` in "
        "Python), or ``--out`` (``out=``), beside which it looks for ``OUT.ckpt.h5``. A library run stopped with "
        "neither wrote ``hpcgpu-stopped.ckpt.h5``: ``Trainer(..., checkpoint='hpcgpu-stopped.ckpt.h5', "
        "resume=True)``."
    ),
    "bfloat16 needs the ml_dtypes package (pip install ml_dtypes)": (
        "NumPy has no bfloat16 of its own: ``pip install ml_dtypes`` (hpcgpu's default install has it)."
    ),
    "hpcgpu.train: stopped (…) after step … (epoch …); …": (
        "Not an error: a stop signal (SIGUSR1, SIGTERM, SIGINT) or the stop file stopped ``fit`` at a step "
        "boundary on every rank, and the checkpoint the line names was written (``hpcgpu-stopped.ckpt.h5`` in the "
        "working directory when the Trainer was given neither ``checkpoint=`` nor ``out=``). Continue with "
        "``Trainer(..., checkpoint=PATH, resume=True)`` and the same data; under ``run_guarded`` the program exits 3."
    ),
    "hpcgpu.train: warning: no checkpoint after the stop: …": (
        "A stopped library run with no checkpoint configured could not write ``hpcgpu-stopped.ckpt.h5`` in the "
        "working directory (a file of that name hpcgpu did not write, or a directory it cannot write): the stop's "
        "progress is not saved. Give the Trainer ``checkpoint=PATH`` so that a stop (and a resume) use that file."
    ),
    "hpcgpu.train: fit: the run has done its … epochs: nothing to train (fit(epochs=N) trains on to N)": (
        "Not an error: a ``fit`` after the run reached its epochs trains nothing and returns the history. "
        "``fit(epochs=N)`` trains on until N epochs in all."
    ),
    "train_epoch: no data yet: call fit(data) first (it runs the epochs, or give it epochs= to stop sooner)": (
        "``train_epoch`` runs one epoch of a run that has its data: the data come with ``fit(data)`` (or the "
        "config's ``data``, read at construction). Call ``fit``; to run one epoch at a time, "
        "``fit(data, epochs=1)`` then ``fit(epochs=2)``..."
    ),
    "not an hpcgpu checkpoint (no format attribute)": (
        "The file at the checkpoint path is HDF5 but was not written by hpcgpu's trainer (or by an "
        "incompatible version): it lacks the ``format`` attribute. Check ``--checkpoint``: it may name your "
        "data or the ``--out`` file by mistake."
    ),
    "--batch-size … is larger than the training set (… samples)": (
        "One global step takes ``--batch-size`` samples and an epoch at least one step, so the batch cannot "
        "exceed the training set's ``N``. Use a smaller ``--batch-size``."
    ),
    "--batch-size … is smaller than the …": (
        "The global batch is split among the data-parallel ranks, and each needs at least one sample. Use a "
        "``--batch-size`` of at least the number of ranks (with ``--tensor-parallel T``: ranks / T), or run "
        "on fewer ranks."
    ),
    "--checkpoint …: cannot write (…)": (
        "Rank 0 could not write the checkpoint (the reason follows: disk full, quota, the directory removed "
        "or made read-only during the run). The older checkpoints are untouched and every rank stops. Free "
        "space or choose another ``--checkpoint``, then rerun with ``--resume``."
    ),
    "…: /test/X has … features, /train/X has …": (
        "The file's test set must have the same features as its training set (the file of ``--data``, or "
        "the path given to ``fit``). Write ``/test/X`` with the same number of columns (the same "
        "preprocessing), or remove ``/test``."
    ),
    "--grad-accum-steps …: a micro-batch of … samples is smaller than the …": (
        "Each of the K micro-batches (``BATCH_SIZE / K`` samples) is split among the data-parallel ranks, "
        "and each rank needs at least one sample. Use a smaller ``--grad-accum-steps``, a larger "
        "``--batch-size``, or fewer ranks."
    ),
    "--out …: cannot write (…)": (
        "Training finished but rank 0 could not write the output file (the reason follows). With a "
        "checkpoint path (``--checkpoint``, ``--checkpoint-every`` or ``--resume``) the final checkpoint was "
        "written first: free space or choose another ``--out``, keep ``--checkpoint`` pointing at the same "
        "file (its default is derived from ``--out``), and rerun with ``--resume``: it continues from the "
        "final checkpoint and only writes the output."
    ),
    "--precision …: … cannot compute in … here (…: …)": (
        "The array module cannot hold the 16-bit type the mixed precision needs: CuPy before 14 has no "
        "bfloat16, and on the CPU NumPy needs a recent ``ml_dtypes``. Upgrade (``pip install -U "
        "'cupy-cuda12x>=14'`` or ``ml_dtypes``), or use ``--precision 16-mixed`` or ``32-true``."
    ),
    "--resume: no readable checkpoint: …": (
        "Checkpoint files exist at the ``--checkpoint`` path but none can be read; the reason for each "
        "follows. Move them aside and start again without ``--resume`` (or with another ``--checkpoint``). "
        "When there is no checkpoint at all, ``--resume`` simply starts from scratch."
    ),
    "check_grad: the model holds CuPy itself (its attribute …), but check_grad passes it NumPy arrays on the "
    "host: compute with the module of the arrays given, xp = hpcgpu.nn.array_module(x), and it runs in both": (
        "The trainer passes a model of one's own the rank's arrays (CuPy arrays on a GPU) and ``check_grad`` "
        "float64 NumPy arrays on the host, so a model that keeps the runtime's module (``self.xp = rt.xp``) "
        "works in one and fails in the other. In ``loss_and_grad`` and ``predict``, take the module from the "
        "arrays: ``xp = hpcgpu.nn.array_module(x)`` (``examples/decay.py`` does)."
    ),
    "Jax: apply must be callable (apply(params, x)), got …": (
        "``hpcgpu.nn.Jax`` takes the model as a pure function ``apply(params, x) -> outputs`` and its parameters "
        "as a pytree: ``nn.Jax(apply, params)``, the function first."
    ),
    "Jax: loss must be 'cross-entropy', 'mse' or a callable, got …": (
        "Name a built-in loss (``\"cross-entropy\"`` for integer labels and logits, ``\"mse\"`` for the sum of "
        "squared errors) or pass ``loss(outputs, y)`` returning the SUM over the samples."
    ),
    "Jax: params has no leaves (arrays)": (
        "The parameter pytree holds no array: pass the initial parameters (dicts, lists or tuples of arrays), "
        "for example ``{\"w\": w0, \"b\": b0}``."
    ),
    "Torch: loss must be callable (loss(outputs, y), the sum), got …": (
        "Pass a loss module or function, ``torch.nn.CrossEntropyLoss(reduction=\"sum\")`` for integer labels, "
        "``torch.nn.MSELoss(reduction=\"sum\")`` for targets: ``nn.Torch(module, loss)``."
    ),
    "Torch: autograd replaced the gradient view of … instead of adding into it": (
        "The adapter gives each parameter a ``.grad`` that is a view of the trainer's gradient buffer, and "
        "autograd adds into it in place; this PyTorch put a new tensor there instead (a sparse gradient, or a "
        "hook that assigns ``.grad``). Use dense gradients and leave ``.grad`` to autograd; report the PyTorch "
        "version if it persists."
    ),
    "Torch: module must be a torch.nn.Module, got …": (
        "``hpcgpu.nn.Torch`` adapts a ``torch.nn.Module``; wrap a function in a module (or use ``nn.Jax`` for "
        "a JAX function)."
    ),
    "Torch: the loss must sum over the samples (…(reduction=\"sum\")), got reduction=…: hpcgpu divides by the "
    "global batch once": (
        "A mean over each rank's micro-batch would make the gradient, and so the model, depend on the number "
        "of ranks. Give the loss ``reduction=\"sum\"``: the trainer divides the summed gradient by the global "
        "batch once, which is the mean over the whole batch at any number of ranks."
    ),
    "model …: the loss does not sum over the samples (a micro-batch's loss is not the sum of its halves'): give a "
    "loss with reduction=\"sum\" (torch.nn.functional.cross_entropy(outputs, y, reduction=\"sum\")); hpcgpu "
    "divides by the global batch once": (
        "At the first step the loss of a micro-batch is compared once with the sum of its two halves' losses (in "
        "eval mode, so each sample's loss is its own): a loss FUNCTION that averages (PyTorch's "
        "``F.cross_entropy``, ``F.mse_loss`` by default, a JAX loss ending in ``.mean()``) gives half that sum, "
        "and the model would depend on the number of ranks. Pass ``reduction=\"sum\"`` (or use ``.sum()``): the "
        "trainer divides the summed gradient by the global batch once."
    ),
    "model … takes … features (those it was first given), got … ones": (
        "A model of your own takes integer features (they reach it as int64: an ``nn.Embedding``'s indices) or "
        "floating ones, as the first data it was given had them; ``fit``'s validation, ``evaluate`` and "
        "``predict`` must give the same kind. Convert the features (``X.astype(np.int64)`` or "
        "``X.astype(np.float32)``) to the kind the model was trained on."
    ),
    "Torch: … has no trainable parameter": (
        "Every parameter of the module has ``requires_grad=False`` (or it has none): there is nothing to train. "
        "Unfreeze the parameters to train."
    ),
    "hpcgpu.nn.… needs …: pip install … (or hpcgpu's … extra)": (
        "The adapter imports its framework when it is built: install it in the environment the ranks run in, "
        "``pip install torch`` or ``pip install jax`` (``pip install hpcgpu[torch]``, ``hpcgpu[jax]``)."
    ),
    "--resume: … was written for --epochs … of a cosine schedule, which spans the run's epochs: this run has "
    "…; only a constant or step schedule can be extended": (
        "A cosine schedule decays to zero at the run's last epoch, so the epochs decide every step's rate: a "
        "run resumed with other epochs would not be the run it continues. Give the checkpoint's ``--epochs``, "
        "or train with ``--schedule constant`` or ``step`` (whose rates do not depend on the total) to be able "
        "to extend a run."
    ),
    "fit: epochs=…: a cosine schedule spans the run's … epochs and cannot be extended; a constant or step "
    "schedule can": (
        "``fit(epochs=N)`` trains on to N epochs in all, which a cosine schedule (decaying to zero at the run's "
        "last epoch) cannot do without changing the rates already used. Build the Trainer with "
        "``schedule=\"constant\"`` (the library's default) or ``\"step\"``, or give ``epochs=`` its final "
        "value from the start."
    ),
    "fit: validation_split=… must be a fraction of the rows, between 0 and 1": (
        "``validation_split`` is the fraction of the rows held out for validation, as in Keras: 0.1 holds out "
        "the last tenth. Give a number strictly between 0 and 1."
    ),
    "fit: validation_split=… takes the whole set's arrays, fit((X, y), validation_split=...), without "
    "validation= or sharded=True": (
        "The split holds out the last rows of the whole set, which only arrays given whole on every rank have. "
        "Give ``validation=`` instead where you have a validation set (or each rank its own rows), and a file's "
        "``/test`` split is its validation set."
    ),
    "fit: validation_split=… of … rows leaves no row for training or none for validation": (
        "The fraction of so few rows rounds to all of them (or none): give a smaller fraction, or more rows."
    ),
    "EarlyStopping: patience must be >= 0 and mode auto, min or max, got patience=…, mode=…": (
        "``patience`` is the number of epochs without improvement before the training ends (0: at the first "
        "one); ``mode`` says whether smaller (``min``) or larger (``max``) is better, ``auto`` deciding by the "
        "metric's name."
    ),
    "EarlyStopping: the epochs have no … (…): monitor one of …": (
        "The monitored metric is not in the epochs' rows, or is NaN there: ``test_*`` metrics need a validation "
        "set (``fit(..., validation=(X, y))`` or ``validation_split=``), and a classifier has no ``test_rmse``. "
        "Monitor one of the metrics the message lists."
    ),
    "has done … epochs, this run asks for … in all: give at least … to go on from it": (
        "``--resume`` (``resume=True``) found a checkpoint of a run that has done more epochs than this run's "
        "``--epochs`` in all. A resumed run may go on to more epochs (the schedule then spans the new total), "
        "never back to fewer: give ``--epochs`` at least the count named, or point ``--checkpoint`` elsewhere to "
        "start afresh."
    ),
    "--resume: … was written with --precision …, this run has …": (
        "A resumed run must keep the precision of the run that wrote the checkpoint. Rerun with the "
        "``--precision`` (or ``--dtype``) named first in the message, or start a new run without "
        "``--resume``."
    ),
    "--resume: … was written with …, this run has …": (
        "A switch a resumed run must keep: ``--drop-last`` or ``--no-drop-last`` (in library use "
        "``drop_last=True`` or ``False``) decides how many steps an epoch has. Rerun with the one the message "
        "names for the checkpoint, or start a new run under another ``--checkpoint``."
    ),
    "--resume: … was written with --… …, this run has …": (
        "A resumed run must keep the options that decide the model, the sample order and the update rule: "
        "``--hidden``, ``--task``, ``--loss``, ``--optimizer``, ``--batch-size``, ``--seed``, ``--dtype``, "
        "``--lr``, ``--momentum``, ``--weight-decay``, ``--schedule``, ``--warmup-epochs``, "
        "``--lr-step-epochs``, ``--lr-gamma`` and ``--epochs`` (in library use the same ``Trainer(...)`` "
        "options, and the optimizer's ``lr``, ``momentum`` and ``weight_decay``). Rerun with the value the "
        "message names for the checkpoint; to train longer or differently, start a new run under another "
        "``--checkpoint``. The number of ranks may change."
    ),
    "--resume: …: …": (
        "The newest readable checkpoint has a field that cannot be loaded (progress, history or loss scaler "
        "state; the reason follows): damaged, or written by another hpcgpu version. Move that file aside so "
        "that ``--resume`` takes the older one (``PATH.1``)."
    ),
    "--tensor-parallel … does not divide the … ranks": (
        "Tensor parallelism groups T consecutive ranks per model replica, so T must divide the number of "
        "ranks. Choose T among its divisors (at 8 ranks: 1, 2, 4 or 8) or change the rank count."
    ),
    "--tensor-parallel … is larger than the smallest hidden width it splits (…)": (
        "The column-parallel layers (hidden layers 1, 3, ...) are split into T slices of at least one unit "
        "each. Use a T no larger than the width named, or wider hidden layers."
    ),
    "--tensor-parallel … needs hidden layers to split": (
        "With ``--hidden none`` the model is one layer and there is nothing to split across ranks. Give "
        "hidden layers, or ``--tensor-parallel 1``."
    ),
    "broadcast_state: the root must be rank 0 with tensor parallelism or ZeRO": (
        "``Trainer.broadcast_state(root)`` (library use) gathers the global state on rank 0 when the model or "
        "its optimizer state is split over ranks. Call it with ``root=0``."
    ),
    "hpcgpu.train: warning: …; falling back to an older checkpoint": (
        "Not an error: with ``--resume`` the newest checkpoint could not be read (the reason is given) and "
        "the trainer resumes from an older one (``PATH.1``, ...), losing the steps in between. Check the "
        "file system that holds it, and remove the damaged file."
    ),
    (
        "training diverged: parameters are not finite after step … (epoch …); not writing a checkpoint; start "
        "again with a smaller --lr (a resume keeps the checkpoint's --lr)"
    ): (
        "Before writing a checkpoint the ranks check the parameters; some are NaN or "
        "infinite, so nothing is written, the last good checkpoint stays and every rank exits with status 2. "
        "Lower ``--lr``, lengthen ``--warmup-epochs``, and check that the features are scaled (e.g. to "
        "[0, 1]). ``--lr`` is one of the options a resume must keep, and a resume with the same options "
        "repeats the same steps, so start a new run (without ``--resume``, or with another ``--checkpoint``)."
    ),
    (
        "training diverged: the loss of step … (epoch …) is …; the last checkpoint is kept; start again with a "
        "smaller --lr (a resume keeps the checkpoint's --lr)"
    ): (
        "The reduced loss of the step named is NaN or infinite, the same on every rank, so all stop with "
        "status 2. Lower ``--lr`` (or lengthen ``--warmup-epochs``), check the features for huge values, and "
        "with ``--precision 16-mixed`` try ``bf16-mixed`` or ``32-true``. A resume must keep ``--lr`` and "
        "would repeat the same steps exactly, so start a new run (without ``--resume``, or with another "
        "``--checkpoint``)."
    ),
    "--resume: … was written with the optimizer …, this run has …": (
        "A checkpoint records its optimizer's configuration (the name and every hyperparameter, such as "
        "``betas``, ``eps`` or ``nesterov``), and this run's optimizer differs: the saved state (momentum, "
        "moment estimates) belongs to the other update rule. Build the optimizer as it was (the message names "
        "both), or start a new run without ``resume=True`` (``--resume``) or under another ``checkpoint=`` "
        "(``--checkpoint``)."
    ),
    "--resume: … was written for another model (…), this run has …": (
        "A checkpoint records the model it was trained for (the ``Dense`` sizes, activations and loss, or the "
        "class and parameter shapes of a model of one's own), and this run's model differs, so the saved "
        "parameters would not fit or would mean something else. Resume with the model that wrote it (the "
        "message names both), or start a new run without ``resume=True`` (``--resume``) or under another "
        "``checkpoint=`` (``--checkpoint``)."
    ),
    "holds optimizer state …, … has …": (
        "Reported as ``--resume: FILE: holds optimizer state [...]``: the checkpoint's optimizer state "
        "arrays (named first) are not those this run's optimizer keeps (SGD ``velocity``; Adam and AdamW "
        "``m`` and ``v``), although its recorded configuration matched: an optimizer of your own with the "
        "``name`` of another but other ``state_names``, or a damaged file. Resume with the optimizer that "
        "wrote it, or start a new run without resuming."
    ),
    "buffers … for the model's …": (
        "A checkpoint (or a state given to ``load_state_dict``) holds other buffers than the model's: it was "
        "written by another module (with or without BatchNorm, or other layers). Resume from a checkpoint the "
        "same model wrote."
    ),
    "buffer … of shape … for the model's …": (
        "A checkpoint's buffer has another shape than the model's (BatchNorm of another width): it was written "
        "by another model. Resume from a checkpoint the same model wrote."
    ),
    "optimizer state … for …'s …": (
        "``Trainer.load_state_dict(state)`` was given optimizer state arrays under other names than this "
        "trainer's optimizer keeps (SGD ``velocity``; Adam and AdamW ``m`` and ``v``): the state comes from a "
        "trainer with another optimizer. Load state saved by a trainer built with the same optimizer class, "
        "or leave the ``\"optimizer\"`` entry out of the dict to keep this optimizer's own state."
    ),
    "… of shape … for parameters of shape …": (
        "Optimizer state given to ``Trainer.load_state_dict`` has another length than this rank's "
        "parameters: it comes from a model of another size, or from a run whose ranks held other slices "
        "(tensor parallelism or ZeRO-1, where ``state_dict()`` holds each rank's own part). Load the state of "
        "the same model on the same layout of ranks, or use checkpoints (``save_checkpoint`` and "
        "``resume=True``), which store the unsplit state and resume at any number of ranks."
    ),
    "Trainer: …": (
        "``Trainer(...)`` was given a keyword that is not an option of ``TrainConfig``; Python's message "
        "follows and names it (``got an unexpected keyword argument 'batchsize'``). Check the spelling "
        "against ``TrainConfig``'s fields (``batch_size``, ``epochs``, ``seed``, ``precision``, ...). The "
        "model, the loss and the optimizer are the first three arguments, not options."
    ),
    "optimizer must be an hpcgpu.optim optimizer (SGD, Adam, AdamW), or for an nn.Torch model torch.optim.SGD, "
    "Adam or AdamW, got …": (
        "The trainer runs the update on its own flat buffers, so it needs an optimizer of ``hpcgpu.optim``, "
        "or for an ``nn.Torch`` model one of PyTorch's SGD, Adam or AdamW built on the module's parameters; "
        "not another library's (optax), and an instance, not the class. Pass e.g. "
        "``optim.SGD(lr=0.01, momentum=0.9)``, ``optim.Adam(lr=1e-3)`` or "
        "``torch.optim.SGD(module.parameters(), lr=0.01, momentum=0.9)``; an optimizer of your own "
        "subclasses ``hpcgpu.optim.Optimizer``."
    ),
    "optimizer: … trains an nn.Torch module's parameters; give hpcgpu.optim's SGD, Adam or AdamW for …": (
        "A ``torch.optim`` optimizer steps a PyTorch module's parameters, which the trainer makes views of its "
        "buffers only for an ``nn.Torch`` model. For the built-in layers, a model of one's own or ``nn.Jax``, "
        "give ``hpcgpu.optim.SGD``, ``Adam`` or ``AdamW`` (the same update rules)."
    ),
    "zero_stage=1 shards hpcgpu's optimizer state, not …'s: give zero_stage=0, or hpcgpu.optim's SGD, Adam or "
    "AdamW": (
        "ZeRO-1 gives each rank the optimizer state of its block of the flat parameters; a ``torch.optim`` "
        "optimizer keeps its state per parameter and steps whole parameters. Train without ZeRO "
        "(``zero_stage=0``), or give ``hpcgpu.optim.SGD``, ``Adam`` or ``AdamW``, whose state ZeRO-1 shards."
    ),
    "optimizer: … holds a tensor that is not a parameter of the module; build it on module.parameters()": (
        "The ``torch.optim`` optimizer given holds a tensor that is not one of the ``nn.Torch`` module's "
        "parameters (another module's, or a copy), which the trainer cannot put on its buffers. Build it on "
        "the module's own parameters: ``torch.optim.SGD(module.parameters(), ...)`` (or groups of them)."
    ),
    "a Sequential model needs a loss (loss=nn.SoftmaxCrossEntropy(), nn.MeanSquaredError() or nn.Huber())": (
        "The built-in layers end in raw outputs, and the trainer needs the loss to compute on them. Pass it "
        "as the second argument: ``Trainer(model, nn.SoftmaxCrossEntropy(), optimizer, ...)`` for integer "
        "class labels, ``nn.MeanSquaredError()`` or ``nn.Huber()`` for numeric targets."
    ),
    "model … computes its own loss in loss_and_grad: give loss= with a Sequential only": (
        "The model is not an ``nn.Sequential``, so the trainer takes it as a model of one's own, whose "
        "``loss_and_grad`` returns the loss; a separate loss was given too. For a model of your own, drop the "
        "loss and give the optimizer by keyword: ``Trainer(model, optimizer=optim.Adam(lr=1e-3), ...)`` (an "
        "optimizer passed second by position is taken for the loss). For built-in layers, wrap them in a "
        "``Sequential``: a single layer is not one, write ``nn.Sequential(nn.Dense(4, 1))``."
    ),
    "the trainer runs Dense layers with their activations; … has other layers": (
        "The trainer runs a ``Sequential`` of ``Dense`` layers only, folding an activation layer into the "
        "linear ``Dense`` just before it; this model has a layer that cannot be folded: an activation first, "
        "after another activation or after a ``Dense`` that has one, or a nested ``Sequential``. Give each "
        "``Dense`` its activation (``nn.Dense(64, 128, activation=\"relu\")``) and flatten nested "
        "``Sequential`` models into one; for other computations write a model of one's own."
    ),
    "model …: ready(…) before forward_done": (
        "A model's ``loss_and_grad_into`` must call ``forward_done(loss_sum, outputs)`` after its forward pass "
        "and before it says any parameter's gradient is final: the loss rides in the first bucket the reducer "
        "sends (see ``hpcgpu.nn.Model``)."
    ),
    "model …: loss_and_grad_into never called forward_done": (
        "A model's ``loss_and_grad_into`` must call ``forward_done(loss_sum, outputs)`` once, after its forward "
        "pass (see ``hpcgpu.nn.Model``)."
    ),
    "model …: a loss scale needs the built-in layers": (
        "Mixed precision (a loss scale) is the built-in layers' capability; a model of one's own, the PyTorch "
        "and JAX adapters included, trains in its own dtype: leave ``precision`` at its default."
    ),
    "model …: init(rng) failed (…: …)": (
        "The trainer calls a model of one's own's ``init(rng)`` (a ``numpy.random.Generator``) to learn its "
        "parameters' sizes, and it raised (the exception follows); an ``AttributeError`` about ``values`` "
        "means that it returned something other than a dict. Make ``init`` return ``{name: array}``; call "
        "``model.init(numpy.random.default_rng(0))`` by hand to see the whole traceback."
    ),
    (
        "--tensor-parallel …: a model of one's own (…) cannot be split over ranks; tensor parallelism needs "
        "the built-in Dense layers (hpcgpu.nn.Sequential)"
    ): (
        "Tensor parallelism splits the weight matrices of ``Dense`` layers over the ranks of a group; the "
        "parameters of a model of one's own are named arrays the trainer cannot know how to split. Use "
        "``tensor_parallel=1`` (data parallelism: every rank holds the whole model), or build the model as an "
        "``hpcgpu.nn.Sequential`` of ``Dense`` layers."
    ),
    (
        "--precision …: a model of one's own (…) computes in its parameters' type; mixed precision needs the "
        "built-in layers"
    ): (
        "``bf16-mixed`` and ``16-mixed`` multiply in 16 bits inside the built-in ``Dense`` layers; a model of "
        "one's own computes as its ``loss_and_grad`` does, in the type of the trainer's float32 or float64 "
        "parameters. Use ``precision=\"32-true\"`` or ``\"64-true\"`` (or ``dtype=``) with it, or build the "
        "model as an ``hpcgpu.nn.Sequential`` of ``Dense`` layers."
    ),
    "fit: give the training data, fit((X, y)) or fit('data.h5')": (
        "``fit()`` was called without data, and the trainer was not made with ``data=``. Pass the training "
        "set: ``fit((X, y))`` for arrays (the whole set on every rank, or each rank's own rows with "
        "``sharded=True``), or the path of an HDF5 file in the trainer's layout, ``fit(\"data.h5\")``."
    ),
    "… must be (X, y) or an HDF5 path, got …": (
        "``fit``, its ``validation=`` and ``evaluate`` take a data set as one pair ``(X, y)`` or as the path "
        "of an HDF5 file; the value named is something else. The usual cause is Keras's ``fit(X, y)`` (then "
        "the line ends ``give fit((X, y))``: ``y`` arrived as ``validation``): write ``fit((X, y))``, the pair "
        "in parentheses, and ``validation=(X_val, y_val)``."
    ),
    "validation: X has … features, the training data has …": (
        "The validation set given to ``fit(..., validation=(X_val, y_val))`` (or to ``evaluate``) has another "
        "number of feature columns than the training data. Prepare both with the same preprocessing."
    ),
    "…: the validation targets have shape … per sample, the training targets …": (
        "The validation (or ``/test``) targets have another shape per sample than the training targets: "
        "``(N,)`` against ``(N, 1)``, or another number of regression targets. Give both the same shape "
        "(``y.reshape(len(y), -1)`` for both, or ``y.ravel()`` for a single target)."
    ),
    "…: X has … features, the model takes …": (
        "The rows given to ``fit`` or ``predict`` (or ``python -m hpcgpu.train predict``) have another width than "
        "the model's input: the ``n_in`` of its first ``Dense`` layer, or for a model of one's own the width of "
        "the data it was first fit on. The model was built for other data, the "
        "features were prepared differently from the training data, or the wrong dataset was named (``--data "
        "FILE:DATASET``, default ``/test/X``). Build the first layer for the data (``nn.Dense(X.shape[1], "
        "...)``), apply the training data's preprocessing, or name the dataset of features."
    ),
    "…: y has … target(s) per sample, the model's last layer gives …": (
        "For regression the model's last ``Dense`` layer needs one output per target: k outputs for targets "
        "of shape (N, k), 1 for targets of shape (N,). Make the last layer ``nn.Dense(h, k)``, or reshape "
        "the targets."
    ),
    "save_results: give a path (the trainer was made without out=)": (
        "``Trainer.save_results()`` writes the results file to the trainer's ``out``, and a trainer made from a model "
        "has none unless given. Name the file, ``trainer.save_results(\"results.h5\")``, or make the trainer with "
        "``out=\"results.h5\"``."
    ),
    # -- Training: the model and its gradient (library use) -----------------------------------------------
    "a tensor-parallel model needs tensor_allreduce": (
        "``Network(..., tensor=(T, t))`` (or ``MLP``) with T > 1 must be given ``tensor_allreduce``, the "
        "function that sums a buffer over the tensor group. Pass it, or use the ``Trainer``, which wires it up."
    ),
    "layer sizes must be at least [D, C], all positive, got …": (
        "``MLP(sizes)`` and ``relu_stack(sizes)`` take the input dimension, the hidden widths and the number "
        "of outputs, all positive, at least two entries: e.g. ``[784, 256, 10]``."
    ),
    "mixed precision is float32 weights with float16 or bfloat16 GEMMs, not … with …": (
        "``Network(..., compute_dtype=...)`` (or ``MLP``) needs ``dtype=float32`` weights and a float16 or "
        "bfloat16 compute type. Use those, or leave ``compute_dtype`` unset for full precision."
    ),
    "params of shape … for a model of … parameters": (
        "``load_state_dict`` of a model (``Network``, ``MLP``, ``FlatModel``; also the ``model`` entry of "
        "``Trainer.load_state_dict``) was given parameters of another length: a state from another layer "
        "layout or tensor slice. Load state from a model built with the same layers and ``tensor``."
    ),
    "… must be of shape (…,) and dtype …, got … …": (
        "An array passed to ``Network``, ``MLP`` or ``FlatModel`` as ``grad``, ``stats`` or ``params`` is not "
        "a flat buffer of the model's length and dtype. Allocate it as ``xp.zeros(n, dtype)`` with the length "
        "and dtype named."
    ),
    "layers … do not cover the gradient of … in order": (
        "``GradientReducer(layers=...)`` takes the layers' ``(start, stop)`` ranges in the flat gradient, "
        "contiguous from 0 to its end. Pass ``MLP.ranges_of(sizes)`` or ranges that tile the buffer in "
        "order."
    ),
    "… of … buckets were posted: ready() was not called for every layer": (
        "With several gradient buckets, every layer must be reported with ``ready()`` during the backward "
        "pass before the reduction is finished. In library use call it for each layer; from the trainer it "
        "is an internal error: please report it with the job's stderr."
    ),
    "… shards over … ranks": (
        "A ``GradientReducer`` with ``shards`` (ZeRO-1) must have one shard per rank of its communicator. "
        "Pass ``shards=comm.size``."
    ),
    "… slots from … run past the buffer": (
        "``GradientReducer.view(first, count)`` asked for more extra slots than were reserved after the "
        "gradient. Reserve them by name in ``slots`` when constructing the reducer."
    ),
    "not a GEMM thread plan (…)": (
        "``GemmPlan.from_json`` was given text that is not a saved plan. The trainer catches this (a "
        "checkpoint's plan that cannot be read is timed again), so in library use pass the output of "
        "``GemmPlan.to_json``."
    ),
    "timing the GEMM … …: …": (
        "With ``--gemm-threads auto`` on the CPU the trainer times each GEMM of the step once, and the "
        "operands of the one named could not be allocated on some rank. Reduce ``--batch-size`` or "
        "``--hidden``, run fewer ranks per node, or use ``--gemm-threads all`` to skip the timing."
    ),
    "timing the step at local batch …: …": (
        "With ``--gemm-threads auto`` the trainer times a whole step on a random local batch, which could not "
        "be allocated on some rank. Reduce ``--batch-size``, run fewer ranks per node, or use "
        "``--gemm-threads all``."
    ),
    "epoch totals of shape …, expected (2,)": (
        "The state given to ``Trainer.load_state_dict`` (or read from a checkpoint, then reported as "
        "``--resume: FILE: …``) holds running totals of the unfinished epoch that are not two numbers (the "
        "loss sum and the metric sum): it is damaged, or not the dict ``Trainer.state_dict()`` returned. Pass "
        "that dict unchanged; for a checkpoint, move the file aside so that ``--resume`` takes the older one "
        "(``PATH.1``)."
    ),
    "… …: not a readable HDF5 file (…)": (
        "The ``--model`` file of ``python -m hpcgpu.train predict`` exists but h5py cannot open it (the "
        "reason follows): it is not HDF5, truncated by an interrupted copy, or locked by a writer still "
        "running. Give the results file (``--out``) of a finished training run."
    ),
    "… …: not a results file of python -m hpcgpu.train (no /model)": (
        "``--model`` must name the results file of a training run (its ``--out``, or the file of "
        "``Trainer.save_results``), which holds the parameters in ``/model`` and the options in its attributes; this "
        "HDF5 file is something else, often the checkpoint or the data set. Pass the results file."
    ),
    "… …: holds a model of one's own (…): build it in the Python code that defines it and call "
    "Trainer.load_weights on that file": (
        "``python -m hpcgpu.train predict`` and ``hpcgpu.load_model`` rebuild the built-in layers from the model "
        "description of the results file, and this file was written for a model of one's own (its class is "
        "named), which only its Python code can run. In that code, build the model and a ``Trainer`` as for "
        "training, call ``trainer.load_weights(FILE)`` and then ``trainer.predict(X)``."
    ),
    "… …: this model's … … is not in the file: the file holds another model's weights": (
        "``load_weights`` takes parameters (and buffers) by name, and the file's ``/model`` (or ``/buffers``) "
        "group lacks one of this model's: "
        "it was written by another model (other layers, or a model of one's own with other names). Load the "
        "results file the same model wrote, or build the model that wrote it (``hpcgpu.load_model`` does for "
        "the built-in layers)."
    ),
    "… …: the file's … … is not in this model: the file holds another model's weights": (
        "The file's ``/model`` (or ``/buffers``) group has a parameter (or buffer) this model lacks (more layers, "
        "other names): it was written "
        "by another model. Load the results file the same model wrote, or build the model that wrote it."
    ),
    "… …: … … has shape … in the file, … in this model": (
        "The file holds the same names with other shapes: the layers' widths (or the number of features or "
        "classes) differ from the model given. Build the model with the widths of the run that wrote the file; "
        "the shapes are the unsplit ones whatever the tensor-parallel split."
    ),
    "… …: no /buffers: the file holds no buffer of the model's (…)": (
        "The model has buffers (BatchNorm's running statistics) and the results file has no ``/buffers`` group: "
        "it was written by a model without them (or by an hpcgpu before buffers were kept). Load the results "
        "file the same model wrote."
    ),
    "Standardize takes both mean and std, or neither (the trainer computes them)": (
        "Give ``nn.Standardize(mean, std)`` (one value a feature each), or ``nn.Standardize()`` for the trainer "
        "to compute them from the training rows at the first ``fit``."
    ),
    "Standardize: mean and std must have one value a feature, got … and …": (
        "``mean`` and ``std`` are 1-D, of the number of input features each."
    ),
    "Standardize: mean must be finite and std finite and positive": (
        "A feature's standard deviation of 0 (a constant feature) cannot divide: give 1 for it (the trainer "
        "does so when it computes the statistics), and no NaN or infinity."
    ),
    "Standardize of … features before a layer of … inputs": (
        "The statistics' length is the number of input features: the first Dense layer's ``n_in``."
    ),
    "Standardize must be the first layer of a Sequential (the inputs' own), or the second after Flatten": (
        "``nn.Standardize`` standardizes the model's inputs: put it first, ``Sequential(Standardize(), "
        "Dense(D, ...), ...)``, or right after ``Flatten()``."
    ),
    "'Trainer' object has no attribute …": (
        "The name is not one of ``hpcgpu.Trainer``'s (a typo, or a name of another version): its attributes and "
        "methods are listed in the API reference (``help(hpcgpu.Trainer)``)."
    ),
    "Trainer: the model takes its input features from the first fit's data (…): call fit first": (
        "A first layer written ``Dense(units)`` (Keras's way) gets its input features from the data at the first "
        "``fit``, and so does the command line's MLP, ``Trainer(config)``, from its data file: until then the "
        "model has no parameters to show, predict with or load into. Call ``fit`` first, or give the widths, "
        "``Dense(n_in, n_out)``."
    ),
    "fit: the command line's MLP (Trainer(config)) is sized by an HDF5 file: give its path, got …": (
        "``Trainer(config)`` builds the command line's MLP from a data file in the trainer's layout (its "
        "features, labels and classes): ``fit()`` trains on the config's ``data``, ``fit('other.h5')`` on another "
        "file. For arrays in memory give a model: ``Trainer(nn.Sequential([...]), loss, ...)``, then "
        "``fit((X, y))``."
    ),
    "fit: the command line's MLP (Trainer(config)) is held out on its data file's /test split: give no "
    "validation=": (
        "The command line's MLP evaluates on the ``/test`` split of its data file, as ``python -m hpcgpu.train`` "
        "does. To hold out another set, give a model (``Trainer(nn.Sequential([...]), loss, ...)``) and "
        "``fit(data, validation=...)``."
    ),
    "…: the first Dense layer's input features are not known: give them, Dense(n_in, n_out), or let "
    "Trainer.fit take them from the data": (
        "``plan_model`` (or ``check_grad``, ``Network``) needs every width; a ``Trainer`` takes the first layer's "
        "from the data at its first ``fit``, or call ``Sequential.build(n_features)``."
    ),
    "save_checkpoint: no data yet: a checkpoint holds the run's place in its data; call fit first": (
        "A checkpoint records where the run is in its data (the epoch, the step, the data's fingerprint): "
        "``save_checkpoint`` is for a trainer that has been given data by ``fit``."
    ),
    "check_grad: …: the first Dense layer's input features are not known: model.build(n_features) first": (
        "A ``Sequential`` whose first layer is ``Dense(units)`` gets its input features at a Trainer's first "
        "``fit``; a gradient check before it needs them given: ``model.build(n_features)``."
    ),
    "the ranks' features have samples of different shapes: …": (
        "Each rank passed its own rows (``sharded=True``) with samples of different shapes: give every rank "
        "samples of one shape (or rows of one width)."
    ),
    "fit: … takes its input features from the data, which gives none: give them, Dense(n_in, n_out)": (
        "The first fit's features have no width to take (not ``(N, D)`` arrays, or an HDF5 file without a readable "
        "``/train/X``): give the data as rows of features, or the widths in the first layer."
    ),
    "Flatten must be the first layer of a Sequential (the samples' own)": (
        "``nn.Flatten`` turns samples of any shape into rows as the trainer takes them in: "
        "``Sequential(Flatten(), Dense(d1 * d2 * ..., ...), ...)``."
    ),
    "the model takes rows of features (n, D), got samples of shape …: put nn.Flatten() first (Keras's Flatten), "
    "or reshape the features to (n, …)": (
        "The built-in layers take rows of features. Features with more than one axis a sample (images) need "
        "``nn.Flatten()`` as the first layer, and a first Dense layer of ``d1 * d2 * ...`` inputs; or pass "
        "``X.reshape(len(X), -1)``. An HDF5 data set is rows already (``N x D``)."
    ),
    "model … takes samples of shape …, got …": (
        "A model of one's own gets the trainer's rows back in the samples' shape, the one its first data had "
        "(``fit``'s ``X.shape[1:]``); ``predict`` or ``evaluate`` was given samples of another shape. Pass them "
        "as the model was trained on them."
    ),
    "--precision …: … computes … only": (
        "The model takes only the mixed precision it names: ``nn.Torch`` runs ``bf16-mixed`` (``torch.autocast`` "
        "to bfloat16 on float32 weights); ``16-mixed`` needs a loss scale inside autograd, not built. Use "
        "``precision=\"bf16-mixed\"`` or leave it at its default."
    ),
    "Torch: mixed precision computes in bfloat16, not …": (
        "``nn.Torch`` runs ``bf16-mixed`` only: ``precision=\"bf16-mixed\"``."
    ),
    "Keras: the model runs on Keras's … backend; hpcgpu takes the JAX backend (KERAS_BACKEND=jax before keras is "
    "imported)": (
        "``nn.Keras`` runs the model as a JAX function: set ``KERAS_BACKEND=jax`` in the environment (or "
        "``os.environ[\"KERAS_BACKEND\"] = \"jax\"`` before the first ``import keras``), with JAX installed."
    ),
    "Torch: parameter … has a post-accumulate-grad hook (register_post_accumulate_grad_hook), which hpcgpu does "
    "not run: its reducer takes each gradient there; p.register_hook(fn) runs on each micro-batch's gradient": (
        "``nn.Torch`` takes each parameter's final gradient with a post-accumulate-grad hook of its own, to post "
        "its bucket's Allreduce during the backward pass; a hook of yours there would see the buffer, not your "
        "parameter, and is never silently skipped. Register ``p.register_hook(fn)`` instead: it runs on each "
        "micro-batch's gradient (of this rank's loss sum) before it is added to what the ranks reduce, and what "
        "it returns is reduced. An optimizer step in a hook is the trainer's optimizer's job."
    ),
    "Jax: params leaf … is …, not floating point, and is trained: mark it non-trainable (trainable=, a mask of "
    "params) or keep it in apply's closure": (
        "``nn.Jax`` trains the leaves of ``params`` in the trainer's floating type: an integer leaf (an index "
        "table, a step counter) would be trained as floats. Mark it non-trainable, ``nn.Jax(apply, params, "
        "trainable={\"table\": False, \"layers\": True})`` (optax.masked's mask: a prefix of the pytree), and "
        "it reaches ``apply`` as it is, kept in checkpoints and results; or let ``apply`` close over it."
    ),
    "Jax: trainable must be True or a pytree of True/False with the structure of params or a prefix of it "
    "(optax.masked's mask), got …": (
        "``trainable=`` says which leaves of ``params`` are trained: True, or a pytree of booleans shaped like "
        "``params`` or like its top levels (``{\"params\": True, \"batch_stats\": False}`` marks whole subtrees), "
        "or a function of ``params`` returning one. A mask of other keys or lengths than ``params``', or "
        "leaves that are not True/False (0 and 1), is refused."
    ),
    "Jax: trainable marks no leaf of params as trained: nothing to train": (
        "Every leaf of ``trainable=`` is False (or ``trainable=False``): mark the leaves the optimizer should "
        "train True."
    ),
    "Jax: apply's updates give … the shape …, not …": (
        "A training call with ``mutable=`` returned an updated leaf of another shape than the leaf it replaces: "
        "the running statistics must keep their shape (a mean over the batch axis, ``h.mean(0)``, not a mean "
        "of the whole batch's array)."
    ),
    "Jax: apply's updates hold …, which is no leaf mutable= names (…)": (
        "The updates a training call returns replace the non-trainable leaves that ``mutable=`` names, at the "
        "same paths as in ``params`` (flax's ``{\"batch_stats\": ...}``). A trained leaf is the optimizer's, "
        "never an update's: name the leaf in ``mutable=`` (and mark it non-trainable with ``trainable=``), or "
        "return it no more."
    ),
    "Jax: mutable must be False, True, or the path names of non-trainable subtrees (\"batch_stats\", "
    "[\"bn1.mean\", \"bn1.var\"]), got …": (
        "``mutable=`` says which non-trainable leaves a training call updates, as flax's ``mutable=`` argument "
        "does: True (all of them), a path name of a subtree (``\"batch_stats\"``), or a list of them; "
        "the names are the pytree's paths joined by dots, as ``nn.Jax(...).state_names`` lists them."
    ),
    "Jax: mutable names …, which is no non-trainable leaf or subtree of params…": (
        "Each name in ``mutable=`` must be a leaf or subtree of ``params`` that ``trainable=`` marks False "
        "(``nn.Jax(...).state_names`` lists them). A trained leaf cannot also be updated by the call: mark its "
        "subtree non-trainable, ``trainable={\"params\": True, \"batch_stats\": False}``."
    ),
    "Jax: mutable=True but no leaf of params is non-trainable (trainable=): nothing for a step to update": (
        "``mutable=True`` updates every non-trainable leaf, and ``trainable=`` marks none: mark the running "
        "statistics non-trainable (``trainable={\"params\": True, \"batch_stats\": False}``), or drop "
        "``mutable=``."
    ),
    "Jax: …(params, x, train=True) returned …, not (outputs, updates): with mutable=, a training call returns "
    "the outputs and the updated leaves, as flax's apply(..., mutable=[...]) does": (
        "With ``mutable=``, ``apply`` is called as ``apply(params, x, train=True)`` in training and must return "
        "``(outputs, updates)``, as ``model.apply(variables, x, train=True, mutable=[\"batch_stats\"])`` does "
        "in flax; ``apply(params, x, train=False)`` returns the outputs alone (evaluation, prediction). A "
        "function of flax: ``lambda v, x, train: model.apply(v, x, train=train, mutable=[\"batch_stats\"] if "
        "train else False)``."
    ),
    "Keras: the model is not built: give its input shape, keras.Input(shape) as its first layer, or call "
    "model.build(input_shape)": (
        "A Keras model has variables only once its input shape is known; ``nn.Keras`` takes them at its "
        "construction."
    ),
    "Keras: the model has non-trainable variables (…): BatchNorm's statistics and a Dropout's seed state are not "
    "carried across steps; use nn.Torch for such a model": (
        "``nn.Keras`` passes the trainable variables through ``stateless_call`` and keeps no other state between "
        "steps: a model with BatchNormalization or Dropout would lose its statistics or repeat its masks. "
        "``nn.Torch`` carries buffers and seeds dropout per step and rank."
    ),
    "Keras: the last layer applies a softmax; \"cross-entropy\" takes logits (Keras's from_logits=True): leave the "
    "softmax out": (
        "hpcgpu's cross-entropy takes the model's logits (Keras's ``from_logits=True``), as the built-in layers "
        "give them: end the model with a linear layer; ``predict`` gives logits (``softmax`` them for "
        "probabilities)."
    ),
    "Jax: mixed precision computes in bfloat16, not …": (
        "``nn.Jax`` runs ``bf16-mixed`` only: ``precision=\"bf16-mixed\"``."
    ),
    "Dense needs positive sizes, got Dense(…, …)": (
        "``nn.Dense(n_in, n_out)`` takes the numbers of input and output features, both at least 1. Give the "
        "data's number of features as the first layer's ``n_in`` and, for the last layer, the number of "
        "classes (or of regression targets) as ``n_out``."
    ),
    "Dropout takes a rate, a number in [0, 1), got …": (
        "``nn.Dropout(rate)`` takes the probability of dropping an element, a number: ``nn.Dropout(0.5)``."
    ),
    "Dropout's rate must be in [0, 1), got …": (
        "The rate is the probability of dropping an element: 0 drops nothing, and 1 would drop everything (no "
        "gradient reaches the layers before). Give a rate in [0, 1), such as 0.1 to 0.5."
    ),
    "Dropout must follow a Dense layer (or its activation) that is not the last": (
        "The built-in ``nn.Dropout`` drops outputs of the Dense layer before it (after its activation): put it "
        "between two Dense layers, ``nn.Sequential(nn.Dense(64, 128, \"relu\"), nn.Dropout(0.2), "
        "nn.Dense(128, 10))``; not first, not after the last layer (the logits), not twice in a row."
    ),
    "Dense(…, …) follows a layer of … outputs": (
        "In a ``Sequential`` each ``Dense`` layer's ``n_in`` must equal the ``n_out`` of the layer before it; "
        "the layer named does not fit its predecessor. Make the sizes chain: "
        "``nn.Sequential(nn.Dense(64, 128, activation=\"relu\"), nn.Dense(128, 10))``."
    ),
    "a Sequential of input … follows a layer of … outputs": (
        "A ``Sequential`` nested in another starts with an ``n_in`` other than the ``n_out`` of the layer "
        "before it. Make the sizes chain; and since the trainer runs only a flat ``Sequential`` of ``Dense`` "
        "layers, list the layers in one ``Sequential`` instead of nesting them."
    ),
    "Sequential needs at least one layer": (
        "``nn.Sequential()`` was given no layers (or an empty list). Pass them one by one or as one list: "
        "``nn.Sequential(nn.Dense(64, 32, activation=\"relu\"), nn.Dense(32, 10))``."
    ),
    "Sequential needs at least one Dense layer": (
        "``nn.Sequential`` has no ``Dense`` layer of its own: it was given only activation layers "
        "(``ReLU()``, ``Tanh()``, ``GELU()``) or only nested ``Sequential`` models, and so has no input size. "
        "Add the ``Dense`` layers, listed in this ``Sequential`` itself."
    ),
    "Sequential takes hpcgpu.nn layers, got …": (
        "``nn.Sequential`` takes layers of ``hpcgpu.nn`` (``Dense``, ``ReLU``, ``Tanh``, ``GELU``, a "
        "``Sequential``), one by one or as one list; it was given something else: another library's layer, "
        "an activation's name, or a class instead of an instance (``nn.ReLU`` for ``nn.ReLU()``). For an "
        "activation by name write ``nn.Dense(n_in, n_out, activation=\"relu\")``."
    ),
    "activation must be one of … or None, got …": (
        "``nn.Dense(..., activation=...)`` takes ``\"relu\"``, ``\"tanh\"``, ``\"gelu\"`` or ``None`` "
        "(linear), in lower case. Leave it ``None`` on the last layer: the losses take its raw outputs "
        "(logits for ``nn.SoftmaxCrossEntropy``)."
    ),
    "unknown layer type … in a model description": (
        "``python -m hpcgpu.train predict`` (like ``hpcgpu.nn.from_spec``) rebuilds the model from the "
        "description a results file records (its ``model`` attribute), and it names a layer type this "
        "hpcgpu does not have: the file was written by a newer hpcgpu, or the attribute was edited. Predict "
        "with the hpcgpu version that trained the model."
    ),
    "unknown loss type … in a model description": (
        "``python -m hpcgpu.train predict`` (like ``hpcgpu.nn.loss_from_spec``) rebuilds the loss from the "
        "description a results file records (its ``model`` attribute), and it names a loss this hpcgpu does "
        "not have: the file was written by a newer hpcgpu, or the attribute was edited. Predict with the "
        "hpcgpu version that trained the model."
    ),
    "loss must be one of …, got …": (
        "``hpcgpu.nn.loss_by_name(name)`` was given a name it does not know (the command line's ``--loss`` "
        "choices catch it earlier). Use ``\"cross-entropy\"``, ``\"mse\"`` or ``\"huber\"``, or construct "
        "the loss itself: ``nn.SoftmaxCrossEntropy()``, ``nn.MeanSquaredError()``, ``nn.Huber(delta)``."
    ),
    "Huber's delta must be > 0, got …": (
        "``nn.Huber(delta)`` is quadratic in the residual up to ``delta`` and linear beyond, so ``delta`` must "
        "be positive. Choose it on the scale of a typical residual: the default 1.0 suits standardized "
        "targets."
    ),
    "… does not define terms": (
        "Raised by the base class ``hpcgpu.nn.Loss`` when a subclass does not implement ``terms``. A loss of "
        "your own must define ``terms(z, y, slots, bias=None)``: write the loss sum and the metric sum into "
        "``slots[0]`` and ``slots[1]``, overwrite ``z`` with the gradient of the loss sum and return it; set "
        "``task`` and ``name`` too. Or use ``nn.SoftmaxCrossEntropy``, ``nn.MeanSquaredError`` or "
        "``nn.Huber``."
    ),
    "check_grad of a Sequential needs its loss": (
        "``nn.check_grad`` differentiates a loss, and a ``Sequential`` has none of its own. Pass it: "
        "``nn.check_grad(model, x, y, loss=nn.SoftmaxCrossEntropy())``."
    ),
    (
        "check_grad: the gradient of … is off by … (relative) from central differences (eps …), more than "
        "rtol …"
    ): (
        "``nn.check_grad`` compared the gradient that ``loss_and_grad`` returns with central finite "
        "differences of its loss, and for the parameter named they differ by more than ``rtol``: the "
        "hand-written gradient is wrong (a sign, a missing factor, a transposed matrix, or the gradient of "
        "the mean where the loss is the sum). Fix that parameter's gradient. A small excess (about 1e-4 to "
        "1e-3) can also come from a loss that is not smooth at the point (``abs``, ``max``) or is computed in "
        "float32: then try another ``eps`` or a looser ``rtol``."
    ),
    (
        "model …: needs the method(s) … (init(rng), loss_and_grad(params, x, y), predict(params, x); see "
        "hpcgpu.nn.Model)"
    ): (
        "The model passed to ``Trainer`` is not an ``nn.Sequential``, so it is taken as a model of one's own, "
        "and it lacks the methods named. Define all three: ``init(rng)`` (the initial parameters by name), "
        "``loss_and_grad(params, x, y)`` (the SUM of the per-sample losses and its gradient by name) and "
        "``predict(params, x)``. Built-in layers go in an ``nn.Sequential``, even a single ``nn.Dense``."
    ),
    "model …: init(rng) must return a non-empty dict of arrays, got …": (
        "A model of one's own's ``init(rng)`` must return its initial parameters as ``{name: array}``, at "
        "least one. Return a dict, not a list, a tuple or a single array: e.g. "
        "``{\"w\": rng.normal(0, 0.1, (D, 1)), \"b\": np.zeros(1)}``."
    ),
    "model …: loss_and_grad must return (loss_sum, dict of gradients), got a … as the gradient": (
        "``loss_and_grad(params, x, y)`` returns a pair: the SUM of the micro-batch's per-sample losses, and "
        "the gradient as a dict by parameter name. Its second value was something else (a list, a single "
        "array): return ``loss_sum, {\"w\": dw, \"b\": db}``."
    ),
    "model …: loss_and_grad's gradient has … (the parameters are …)": (
        "The gradient dict must have exactly the names of the parameters ``init`` returned, one entry each; "
        "it lacks some (``no ...``) or has names ``init`` does not (``unknown ...``). Return a gradient for "
        "every parameter under the same name, zeros for one the loss does not depend on."
    ),
    "model …: the gradient of … has shape …, the parameter …": (
        "Each gradient must have its parameter's shape (a scalar may stand for a one-element parameter), and "
        "the one named does not: often a transposed matrix, or a bias gradient not summed over the batch. "
        "For ``z = x @ w + b`` return ``x.T @ dz`` for ``w`` and ``dz.sum(axis=0)`` for ``b``."
    ),
    "model …: loss_and_grad must return (loss_sum, gradients) or (loss_sum, gradients, outputs), got …": (
        "``loss_and_grad(params, x, y)`` returns a pair, ``loss_sum, grads``, or a triple with the batch's "
        "outputs third (for the accuracy, or RMSE and R^2, of each epoch). It returned something else: often "
        "the loss alone, or a triple built by mistake with a fourth value. Checked on every rank at the first "
        "step, and said once."
    ),
    "model …: loss_and_grad's outputs have shape …, not one row for each of the batch's … samples": (
        "The outputs a model returns third from ``loss_and_grad`` are the batch's predictions, one row a "
        "sample (as ``predict(params, x)`` gives them): the metrics compare them with the labels row by row. "
        "Return the outputs of the ``x`` passed in, not a transposed or reduced array."
    ),
    "model …: loss_and_grad's outputs have … column(s) a sample, but the labels include class …: a classifier's "
    "outputs are one score a class (integer targets of a regression: give task=\"regression\")": (
        "A classifier's outputs are one score (a logit) per class, and the predicted class is the column of "
        "the largest; labels run 0..C-1, so the outputs need at least C columns. The model's last layer has "
        "fewer outputs than the data has classes: make it as wide as the number of classes. Integer targets "
        "are taken as class labels; a regression on integers (counts) says so: ``Trainer(..., "
        "task=\"regression\")``."
    ),
    "… row … holds …, beyond …'s range (…): use dtype=\"float64\", or rescale the data": (
        "A feature (``X``) or regression target (``y``) given in memory is finite but too large for the "
        "trainer's dtype (float32 by default, largest 3.4e38): cast, it would become infinity. Train in float64 "
        "(``Trainer(..., dtype=\"float64\")``), or rescale the data (``Standardize`` for the features, or "
        "divide by a known scale) before ``fit``. The same data in a file is said with ``--dtype float64``."
    ),
    "hpcgpu.train: warning: a stop would save no checkpoint (…): give checkpoint=": (
        "A library run with neither ``checkpoint=`` nor ``out=`` writes ``hpcgpu-stopped.ckpt.h5`` in the "
        "working directory when a signal or the stop file stops it, and the output policy would refuse that "
        "file (one of yours is there by that name, or the directory is not writable): said at the start of "
        "``fit``, not after the work. Give ``checkpoint=PATH`` (or ``out=``), or move the file."
    ),
    "check_grad: model …'s loss_and_grad must return (loss_sum, gradients) or (loss_sum, gradients, outputs), "
    "got …": (
        "``check_grad`` calls the model's ``loss_and_grad(params, x, y)`` as the trainer does, and it did not "
        "return ``loss_sum, grads`` (or a triple with the outputs third): often the loss alone."
    ),
    "check_grad: …": (
        "``check_grad`` found what training would refuse in the gradient the model returns (the rest of the "
        "line is the trainer's own message: a parameter without a gradient, a name ``init`` does not give, a "
        "shape that is not the parameter's): see that message's entry, above."
    ),
    "fit: no argument …": (
        "``Trainer.fit`` takes ``data`` (one pair ``(X, y)``, or an HDF5 path), ``validation``, ``sharded``, "
        "``epochs``, ``validation_split`` and ``callbacks``. The line names a Keras argument and hpcgpu's way "
        "to say it: ``fit(x=X, y=y)`` is ``fit((X, y))``; ``validation_data=`` is ``validation=``; "
        "``batch_size`` (the global batch), ``progress`` (for ``verbose``) and the rest belong to the "
        "``Trainer``; every epoch is shuffled from the seed."
    ),
    "EarlyStopping: no argument …: it takes monitor, patience, min_delta, mode and restore_best": (
        "``hpcgpu.train.EarlyStopping`` takes ``monitor``, ``patience``, ``min_delta``, ``mode`` and "
        "``restore_best`` (True by default: the best epoch's parameters are put back at the end). Keras's "
        "``restore_best_weights`` is ``restore_best`` here; ``baseline``, ``verbose`` and "
        "``start_from_epoch`` have no counterpart: a ``Callback`` of one's own does those."
    ),
    "… does not define init(rng)": (
        "Raised by the base class ``hpcgpu.nn.Model`` when a subclass does not implement ``init``. A model of "
        "your own must define ``init(rng)``, returning its initial parameters as ``{name: array}`` (``rng`` "
        "is a ``numpy.random.Generator``, seeded alike on every rank)."
    ),
    "… does not define loss_and_grad(params, x, y)": (
        "Raised by the base class ``hpcgpu.nn.Model`` when a subclass does not implement ``loss_and_grad``. "
        "A model of your own must define ``loss_and_grad(params, x, y)``, returning the SUM of the per-sample "
        "losses of the rows given and its gradient as ``{name: array}`` (check it with ``nn.check_grad``)."
    ),
    "… does not define predict(params, x)": (
        "Raised by the base class ``hpcgpu.nn.Model`` when a subclass does not implement ``predict``. A model "
        "of your own must define ``predict(params, x)``, returning its outputs for the rows of ``x``: an array "
        "of one row per sample (``Trainer.predict`` and ``evaluate`` use it)."
    ),
    # -- Linear algebra: the entry checks every routine shares (hpcgpu/linalg/_checks.py) ------------------
    "…: … must be an hpcgpu.DistMatrix, got …": (
        "A routine of :mod:`hpcgpu.linalg` (``cholesky``, ``solve``, ``lstsq``...) was given something other "
        "than a distributed matrix. Make one with ``hpcgpu.DistMatrix.from_global``, ``from_hdf5`` or "
        "``random``; a NumPy array on one rank is not distributed (SciPy's routine is the one for it)."
    ),
    "…: … must be an hpcgpu.DistMatrix or CyclicMatrix, got …": (
        "A factorization (``cholesky``, ``cho_factor``, ``lu_factor``) or ``solve`` was given something other "
        "than a distributed matrix. Make one with ``hpcgpu.DistMatrix.from_global``, ``from_hdf5`` or "
        "``random`` (and, to keep it in the factorizations' layout, ``.to_cyclic()``); a NumPy array on one rank "
        "is not distributed (SciPy's routine is the one for it)."
    ),
    "…: … must be an hpcgpu.DistMatrix, got a CyclicMatrix (only the factorizations and solve take one): "
    "….to_distmatrix()": (
        "A block-cyclic matrix (``DistMatrix.to_cyclic``) went to a routine that reads the block layout "
        "(``solve_triangular``, ``lstsq``, ``qr``, ``cho_solve``'s right-hand side...). Only ``cholesky``, "
        "``cho_factor``, ``lu_factor`` and ``solve`` take a ``CyclicMatrix`` as A. Give the routine "
        "``c.to_distmatrix()`` (one ``Alltoallv``)."
    ),
    "…: nb=… but A is block-cyclic with nb …: leave nb out (A is factored in its own layout), or make A with "
    "a.to_distmatrix().to_cyclic(nb)": (
        "A ``CyclicMatrix`` is factored where it lies, so its blocks are the factorization's: another ``nb`` "
        "would need a move, which the layout was kept to avoid. Leave ``nb`` out (or give the matrix's own, "
        "``c.nb``), or make the matrix again with the block size wanted: ``c.to_distmatrix().to_cyclic(nb)``."
    ),
    "…: grid …x… but A is block-cyclic on grid …x…: leave grid out (A is factored in its own layout), or make A "
    "with a.to_distmatrix().to_cyclic(grid=grid)": (
        "``lu_factor(c, grid=...)`` of a ``CyclicMatrix`` asked for another grid than the one its blocks lie on. "
        "It is factored on its own grid: leave ``grid`` out, or make the matrix on the grid wanted, "
        "``c.to_distmatrix().to_cyclic(grid=grid)`` (LU pivots fastest on a flat one, ``a.grid.flat()``)."
    ),
    "…: … is …; the solvers take … (a.astype(\"float64\"))": (
        "The factorizations and solvers take float32, float64, complex64 and complex128, LAPACK's and "
        "cuSOLVER's four kinds; half precision and bfloat16 are for ``matmul`` only. Convert first: "
        "``a.astype(\"float64\")``."
    ),
    "…: … must be square, got … x …": (
        "Cholesky, LU and ``solve`` factor square matrices. For an overdetermined system (more rows than "
        "columns) use ``hpcgpu.linalg.lstsq``."
    ),
    "…: A and B are on different grids (…x… and …x…): b.redistribute(a.grid)": (
        "A and the right-hand side B live on different process grids, so their rows are not on the same "
        "ranks. Move B onto A's grid first (``b.redistribute(a.grid)``: one ``Alltoallv``)."
    ),
    "…: A is … and B is …: give both one dtype (b.astype(a.dtype))": (
        "A and B have different dtypes; the solvers work in one. Convert B (``b.astype(a.dtype)``), or both "
        "to the wider kind."
    ),
    "…: shapes do not conform: A is … x …, B has … rows (A's … needed)": (
        "B must have as many rows as A (``A x = B``). Check which dataset was read as B, or transpose it "
        "(``b.T`` is a view that costs nothing until used)."
    ),
    "…: nb must be an int (a block size, >= 1) or None, got …": (
        "``nb`` is the block size of the block-cyclic layout the factorizations work on: an integer, or "
        "``None`` for the default (about 10 panels a grid row or column, 64-256 on a host, 256-512 on a GPU; "
        ":doc:`guide/linalg`)."
    ),
    "triangle must be 'lower', 'upper' or None, got …": (
        "``hpcgpu.linalg.cyclic.to_cyclic`` and ``from_cyclic`` (the moves into and out of the block-cyclic "
        "layout) take ``triangle=\"lower\"`` or ``\"upper\"`` to move only that triangle of a square matrix, "
        "or ``None`` (the default) for the whole matrix. Give one of the three."
    ),
    "a triangle's move found runs not consecutive in a layout": (
        "A check inside the move of one triangle into or out of the block-cyclic layout (Cholesky, "
        "``cho_solve``, ``solve_triangular``) failed: a bug in hpcgpu, not in your input. Please report it with "
        "the matrix's order, ``nb``, the grid and the number of ranks; ``nb=None`` or another ``nb`` may avoid "
        "it meanwhile."
    ),
    "…: nb must be >= 1, got …": (
        "The block size must be at least 1. Leave it out for the default, or give about 256 on a CPU and "
        "512-1024 on a GPU."
    ),
    "…: needs … GiB of device memory a rank, more than its GPU has free (… GiB): …": (
        "The routine's blocks, panels and workspace would not fit the GPU's free memory on some rank. Use more "
        "ranks (each then holds less), free device memory first (CuPy's memory pool: "
        "``cupy.get_default_memory_pool().free_all_blocks()``), or solve a smaller problem."
    ),
    "…: … holds NaN or inf (at row …, column …): the solvers need finite values": (
        "A factorization of a matrix holding NaN or infinity returns garbage without saying so (LAPACK does "
        "not check). The first such element found is named by its global row and column: fix the data that "
        "made it, or drop those rows."
    ),
    "module 'hpcgpu.linalg' has no attribute …": (
        "The name is not one of :mod:`hpcgpu.linalg`'s: check its spelling against the guide's table of names "
        "(:doc:`guide/linalg`). SciPy's names (``cholesky``, ``lu_factor``, ``solve``, ``lstsq``...) and "
        "ScaLAPACK's (``pdpotrf``, ``pdgetrf``, ``pdgesv``, ``pdgels``...) are both there."
    ),
    # -- Matrix multiply and distributed matrices ---------------------------------------------------------
    "--alpha and --beta must be finite, got … and …": (
        "``--alpha`` and ``--beta`` must be finite numbers (``1``, ``-0.5``, ``1+2j``); NaN or infinity "
        "would poison every element of C."
    ),
    "--alpha/--beta: complex values for … matrices": (
        "A complex ``--alpha`` or ``--beta`` cannot scale real matrices. Give real values, or compute in a "
        "complex type with ``--dtype complex64`` or ``complex128``."
    ),
    "--bench must be >= 1, got …": (
        "``--bench N`` multiplies random N x N matrices; N must be at least 1."
    ),
    "--beta … needs --c-in, the C it multiplies": (
        "``C = alpha op(A) op(B) + beta C`` needs an input C when beta is not 0. Pass it with "
        "``--c-in FILE[:DATASET]``, or drop ``--beta``."
    ),
    "--c-in … is … x …, op(A) op(B) is … x …": (
        "The C given with ``--c-in`` must have the shape of the product, m x n after ``--transa`` and "
        "``--transb``. Give the right file or dataset, or the right transposes."
    ),
    "--memory-limit must be > 0, got …": (
        "``--memory-limit`` is MiB a rank may use for the 2.5-D algorithm's copies and must be positive. "
        "Leave it out for no limit."
    ),
    "--panel must be >= 1, got …": (
        "``--panel`` is the SUMMA panel width in columns and must be at least 1. Leave it out to take the "
        "widest panel within ``--panel-memory``."
    ),
    "--panel-memory must be > 0, got …": (
        "``--panel-memory`` is MiB a rank may use for the panels in flight and must be positive (default "
        "256)."
    ),
    "give A, B and -o C, or --bench N": (
        "``python -m hpcgpu matmul`` multiplies two HDF5 matrices into a third, so it needs both inputs and "
        "``-o``, e.g. ``python -m hpcgpu matmul A.h5 B.h5 -o C.h5``; or it runs a benchmark with "
        "``--bench N`` and needs none of them."
    ),
    "give …, or --bench N": (
        "``python -m hpcgpu solve`` and ``lstsq`` need A, B and ``-o``, e.g. ``python -m hpcgpu solve A.h5:A "
        "B.h5:B -o X.h5``; ``cholesky`` needs A and ``-o``. With ``--bench N`` they solve random matrices "
        "instead and need none of them."
    ),
    "--nb must be >= 1, got …": (
        "``--nb`` of ``solve``, ``lstsq`` and ``cholesky`` is the block size of the block-cyclic layout the "
        "routine works on, in rows and columns, and must be at least 1. Leave it out for the default (256 on a "
        "CPU, 512 on a GPU); see the linear-algebra guide for how to choose it."
    ),
    "inner dimensions differ: op(…) is … x …, op(…) is … x …": (
        "For ``op(A) op(B)`` the columns of ``op(A)`` must equal the rows of ``op(B)``; the shapes of the two "
        "files (after ``--transa`` / ``--transb``) do not match. Check the files and datasets, or transpose "
        "one with ``--transa T`` or ``--transb T``."
    ),
    "part … of … does not exist": (
        "An internal consistency check of the block arithmetic: a rank asked for a block outside the grid. "
        "No input should cause it; please report it with the job's stderr."
    ),
    "from_global: expected a 2-D array, got shape …": (
        "``DistMatrix.from_global`` distributes a matrix from the root rank, and the array there is not "
        "2-D. Reshape it (``a.reshape(m, n)``, or ``a[:, None]`` for a column)."
    ),
    "local block has shape …, expected … for … on grid …": (
        "``DistMatrix(local, gshape, grid)`` was given a block that is not this rank's share of the global "
        "shape on that grid. Use ``grid.block_shape(gshape)`` for its shape, or build the matrix with "
        "``DistMatrix.from_global``, ``from_hdf5`` or ``random``."
    ),
    (
        "… …: another process has it open for writing (its HDF5 file lock is held): close it there first, or "
        "write elsewhere"
    ): (
        "The output file exists and another process (a notebook, a viewer opened for editing, another job) "
        "has it open for writing: HDF5 holds a lock on it. Replacing it would lose what that process writes, "
        "so nothing was run. Close the file there, or give another output name."
    ),
    (
        "… …: process … on this node has it open for writing (HDF5_USE_FILE_LOCKING=FALSE or no file locks: "
        "only this node's processes are seen): close it there first, or write elsewhere"
    ): (
        "The output file is open for writing in the process named, on rank 0's node. With "
        "``HDF5_USE_FILE_LOCKING=FALSE`` (or a file system without locks) HDF5 takes no lock, so hpcgpu "
        "looks at the open files of this node's processes instead (``/proc``); a writer on another node "
        "cannot be seen then. Close the file there, or give another output name."
    ),
    "… …: exists and is not a readable HDF5 file (…): it is not replaced; remove it or write elsewhere": (
        "A ``FILE:DATASET`` output adds or replaces one dataset in ``FILE``, keeping its other objects; the "
        "file exists but is not HDF5 (or cannot be read: the reason follows), so it is left as it was. Give "
        "another output name, or remove the file if it is yours to lose."
    ),
    "… …:…: is a … in that file, not a dataset: it is not replaced; name another dataset": (
        "The dataset path of a ``FILE:DATASET`` output names a group (or another object) of the existing "
        "file; writing there would remove it with everything under it. Name a dataset path that is free or "
        "holds a dataset, e.g. ``-o out.h5:/results/C``."
    ),
    "…: shape must be two sizes >= 0, got …": (
        "``DistMatrix.random(gshape)`` and ``DistMatrix.zeros(gshape)`` take a pair ``(m, n)`` of "
        "non-negative integer sizes."
    ),
    "from_global: root must be a rank of the grid (0 to …), got …": (
        "``DistMatrix.from_global(a, grid, root=...)`` distributes the array held by ``root``, a rank of the "
        "grid's communicator. Give a rank from 0 to the grid's size - 1 (the same on every rank)."
    ),
    "gather: root must be a rank of the grid (0 to …), got …": (
        "``DistMatrix.gather(root=...)`` collects the matrix on ``root``, a rank of the grid's communicator. "
        "Give a rank from 0 to the grid's size - 1 (the same on every rank), or write the matrix with "
        "``to_hdf5`` when it is too large for one rank."
    ),
    "redistribute: grid … is not over the ranks of grid …": (
        "``DistMatrix.redistribute(grid)`` moves blocks among the same ranks, so the new grid must be built "
        "on the same communicator (congruent). Build it with ``ProcessGrid(dims, comm=...)`` over the same "
        "ranks."
    ),
    "…: dtype … is not one of …": (
        "Distributed matrices hold float32, float64, complex64, complex128, float16 or (with ``ml_dtypes``) "
        "bfloat16. Convert the data, or pass ``dtype=`` / ``--dtype`` with one of them; integer data is read "
        "as float64 by default."
    ),
    "…: holds … datasets (…); name one as FILE:DATASET": (
        "The file holds several datasets (or none), so hpcgpu cannot guess which is the matrix. Name it "
        "after a colon, e.g. ``python -m hpcgpu matmul a.h5:/A b.h5:/B -o c.h5``."
    ),
    "…: no dataset …": (
        "The dataset after the colon in ``FILE:DATASET`` is not in the file (or is a group). List the file's "
        "datasets with ``h5ls -r FILE`` and give the right path."
    ),
    "…:…: cannot read block …:… x …:… (…)": (
        "A rank could open the file but not read its block (rows x columns named; the HDF5 reason follows). "
        "Usually the file is not on a file system every node sees, or it changed during the run; with "
        "HDF5 locking errors on a parallel file system set ``HDF5_USE_FILE_LOCKING=FALSE``."
    ),
    "…:…: complex data cannot be read as … (it would lose the imaginary part)": (
        "The dataset is complex but a real ``--dtype`` (or ``dtype=``) was asked for. Use ``complex64`` or "
        "``complex128``, or leave ``--dtype`` out to keep the file's type."
    ),
    "…:…: must be a 2-D matrix, has shape …": (
        "The dataset is not 2-D. Store the matrix as a 2-D dataset (reshape it before writing), or name "
        "another dataset."
    ),
    "…:…: must be numeric, has dtype …": (
        "The dataset holds strings, a compound type or an unsupported width. Store the matrix as integers, "
        "floats or complex numbers."
    ),
    "--grid must look like 2x3 (rows x columns), got …": (
        "``--grid`` takes the process grid as ``ROWSxCOLS`` with positive integers (``x``, ``*`` or ``,`` "
        "between them), e.g. ``--grid 2x4``. Leave it out for the most square grid ``MPI_Dims_create`` "
        "finds."
    ),
    "--grid …x… has … places for … ranks": (
        "The process grid must use every rank exactly once: rows x columns must equal the number of ranks. "
        "Choose a factorisation of it (at 6 ranks: 1x6, 2x3, 3x2, 6x1) or leave ``--grid`` out."
    ),
    "matmul: 2.5-D with replication … needs … MiB a rank, the memory limit is … MiB": (
        "The 2.5-D algorithm keeps c copies of the blocks, and with the replication asked for a rank would "
        "need more than ``--memory-limit`` (checked before anything moves). Raise the limit, choose a smaller "
        "``--replication``, or use ``--algorithm summa`` (or ``auto``, which picks what fits)."
    ),
    "matmul: A and B are on different process grids (… and …)": (
        "Both operands of ``hpcgpu.matmul`` must be distributed on the same ``ProcessGrid`` object. Create "
        "them with the same grid, or ``redistribute`` one onto the other's grid."
    ),
    "matmul: algorithm 2.5d needs replication (c, with P / c a square)": (
        "``--algorithm 2.5d`` needs the number of layers: give ``--replication C`` (``replication=`` in "
        "library use) with P / C a perfect square, e.g. ``--replication 2`` at 8 ranks; or use "
        "``--algorithm auto``."
    ),
    "matmul: algorithm must be summa, stationary-a, 2.5d or auto, got …": (
        "``hpcgpu.matmul(algorithm=...)`` was given an unknown algorithm. Use ``\"summa\"``, "
        "``\"stationary-a\"`` (A stays where it lies: for a product with few columns), ``\"2.5d\"`` or "
        "``\"auto\"``."
    ),
    "matmul: beta = … needs a c to add to": (
        "With beta not 0, ``C = alpha op(A) op(B) + beta C`` needs an input C. Pass ``c=`` (a ``DistMatrix`` "
        "of the product's shape), or ``beta=0``."
    ),
    "matmul: c is … x … … on grid …; expected … x … … on grid …": (
        "The ``c`` given to ``hpcgpu.matmul`` must have the product's shape, the operands' dtype and be on "
        "the same grid object. Build it accordingly (e.g. ``DistMatrix.from_hdf5(..., grid=a.grid, "
        "dtype=a.dtype)``)."
    ),
    "matmul: c must be a DistMatrix, got …": (
        "``hpcgpu.matmul(c=...)`` takes a ``DistMatrix``, not a local array. Distribute it first with "
        "``DistMatrix.from_global`` or ``from_hdf5``."
    ),
    "matmul: c must not be a or b (C is written while A and B are read, as PDGEMM forbids)": (
        "C is overwritten while panels of A and B are still being read, so it cannot be one of them. Pass a "
        "copy (``a.copy()``) as ``c`` or as the operand."
    ),
    "matmul: complex alpha or beta for … matrices": (
        "Real matrices cannot be scaled by a complex alpha or beta. Use real scalars, or complex matrices."
    ),
    "matmul: dtypes differ: A is …, B is …": (
        "``hpcgpu.matmul`` multiplies operands of one dtype. Convert one (``DistMatrix.from_hdf5(..., "
        "dtype=...)``); the command line does this itself by reading both in the wider type."
    ),
    "matmul: expected two DistMatrix, got … and …": (
        "``hpcgpu.matmul(a, b)`` takes distributed matrices, not NumPy or CuPy arrays. Make them with "
        "``DistMatrix.from_global``, ``from_hdf5`` or ``random``."
    ),
    "matmul: inner dimensions differ: op(A) is … x …, op(B) is … x …": (
        "The columns of ``op(A)`` must equal the rows of ``op(B)``. Check the shapes, or the ``transa`` / "
        "``transb`` arguments."
    ),
    "matmul: panel must be >= 1, got …": (
        "``panel`` is the SUMMA panel width in columns and must be at least 1; leave it ``None`` to take the "
        "widest within ``panel_memory``."
    ),
    "…: A is singular: U's diagonal is exactly zero at column … (LAPACK info …)": (
        "``lu_factor`` or ``solve`` (``python -m hpcgpu solve``) met an exactly zero pivot: after partial "
        "pivoting over the whole column, every remaining element of that column of the matrix being factored "
        "is 0, so A has no inverse (LAPACK's ``info`` is the column plus one). A column of zeros, two equal rows "
        "or columns, or a matrix of rank below n does this. Check how A was built; for a singular or "
        "rank-deficient system solve the least-squares problem instead (``lstsq``), or, for a positive "
        "definite A, ``solve(assume_a=\"pos\")``."
    ),
    "…: grid must be an hpcgpu.ProcessGrid over A's ranks or None, got …": (
        "``lu_factor``'s ``grid`` is the grid to factor on: an ``hpcgpu.ProcessGrid`` over the ranks of A's "
        "grid, or None for the default flat grid (``a.grid.flat()``, ``1 x P`` below 16 ranks). A shape such as "
        "``(2, 4)`` is not a grid: make one, ``hpcgpu.ProcessGrid((2, 4), comm=a.grid.cart)``."
    ),
    "…: grid …x… is not over A's ranks in A's order: make it from A's grid, "
    "hpcgpu.ProcessGrid((pr, pc), comm=a.grid.cart)": (
        "The grid to factor on must hold A's ranks in A's order, so that A's blocks can move onto it: it was made "
        "from another communicator (a ``Split`` of other ranks or of another order, or ``COMM_WORLD`` where A "
        "lives on a part of it). Make it from A's grid's communicator, as the message shows."
    ),
    "…: grid was freed (ProcessGrid.free): make it again from A's grid, hpcgpu.ProcessGrid((pr, pc), "
    "comm=a.grid.cart)": (
        "The grid given to factor on had been freed (``ProcessGrid.free``, or a ``free`` of the grid it came from, "
        "which frees its ``wide`` and ``flat`` grids too): its communicators are gone. Make the grid again from "
        "A's grid's communicator, or leave ``grid`` out for the default flat grid."
    ),
    "…: piv must be lu_factor's pivots, … integers, got …": (
        "``lu_solve((lu, piv), b)`` takes the pair ``lu_factor`` returned unchanged: ``piv`` is a NumPy "
        "integer array of n pivot rows. Pass the same ``piv`` that came with ``lu``."
    ),
    "…: piv must be lu_factor's pivots: piv[i] in i..…": (
        "LAPACK's pivots say that row ``i`` was interchanged with row ``piv[i]``, so ``i <= piv[i] < n``; the "
        "``piv`` given breaks that (a permutation vector, or 1-based pivots from Fortran). Pass the ``piv`` "
        "that ``lu_factor`` returned with ``lu``."
    ),
    "…: the factors must be lu_factor's (lu, piv), got …": (
        "``lu_solve``'s first argument is the pair ``(lu, piv)`` that ``lu_factor`` returned; it was given "
        "something else (the matrix A itself, or ``lu`` alone). Write ``lu_solve(lu_factor(a), b)``."
    ),
    "…: trans must be 0, 1 or 2 (A X = B, A^T X = B, A^H X = B), got …": (
        "``lu_solve``'s ``trans`` chooses the system, as SciPy's does: 0 solves ``A X = B``, 1 ``A^T X = B`` "
        "and 2 ``A^H X = B``. Give one of these integers."
    ),
    "…: assume_a must be 'gen' (LU) or 'pos' (Cholesky), got …": (
        "``solve`` (``--assume``) serves two of SciPy's ``assume_a`` values: ``\"gen\"`` for any square "
        "matrix (LU with partial pivoting) and ``\"pos\"`` for a Hermitian positive definite one (Cholesky, "
        "twice as fast). For a symmetric indefinite, triangular or banded matrix use ``\"gen\"`` "
        "(or ``solve_triangular`` for a triangular one)."
    ),
    "…: A is not positive definite: the leading minor of order … is not (column … of 0..…)": (
        "``cholesky``, ``cho_factor`` or ``solve(assume_a=\"pos\")`` met a leading minor ``A[:k, :k]`` that is "
        "not positive definite (LAPACK's ``info`` is its order k), so A has no Cholesky factor: it is not "
        "Hermitian positive definite, or only the triangle read (``lower``) holds what you meant. Check how A "
        "was built (a covariance or Gram matrix that lost precision may need a small shift to its diagonal); for "
        "a general square A use ``solve`` or ``lu_factor``."
    ),
    "…: c_and_lower must be (factor, lower) with the factor from cho_factor or cholesky (a CholeskyFactor or "
    "DistMatrix), got …": (
        "``cho_solve``'s first argument is the pair ``cho_factor`` returned, ``(c, lower)``, unchanged, or a "
        "factor from ``cholesky`` with its ``lower``: ``cho_solve((L, True), b)``. It was given the matrix "
        "itself or the factor alone."
    ),
    "…: lower=… but the factor was made with lower=…": (
        "The pair given to ``cho_solve`` says ``lower`` but its ``CholeskyFactor`` was made with the other "
        "triangle. Pass the pair ``cho_factor`` returned unchanged."
    ),
    "…: trans must be 0, 1, 2, 'N', 'T' or 'C', got …": (
        "``solve_triangular``'s ``trans`` chooses the system, as SciPy's does: 0 or ``\"N\"`` solves "
        "``A X = B``, 1 or ``\"T\"`` ``A^T X = B``, 2 or ``\"C\"`` ``A^H X = B``."
    ),
    "…: … must be True or False, got …": (
        "``lower`` and ``unit_diagonal`` of ``cholesky``, ``cho_factor``, ``cho_solve`` and "
        "``solve_triangular`` are flags: give ``True`` or ``False`` (not a string, ``None`` or a number)."
    ),
    "matmul: math_mode must be one of …, got …": (
        "``math_mode`` (``--math-mode``) chooses the local GEMMs' arithmetic on a GPU. Use ``\"default\"`` "
        "(CuPy's mode: TF32 under ``CUPY_TF32=1``), ``\"tf32\"`` or ``\"full\"`` (IEEE)."
    ),
    "matmul: replication is for algorithm 2.5d": (
        "``--replication`` (``replication=``) only has a meaning for the 2.5-D algorithm, and the algorithm "
        "is SUMMA (the default). Add ``--algorithm 2.5d``, or drop ``--replication``."
    ),
    "matmul: replication … does not divide the … ranks into … squares (P = c q^2)": (
        "2.5-D arranges the P ranks as c layers of q x q, so P / c must be a perfect square. At 8 ranks use "
        "c = 2 (2 x 2 x 2) or 8; at 16 ranks 1, 4 or 16; or use ``--algorithm auto``."
    ),
    "matmul: … must be N, T or C, got …": (
        "``transa`` and ``transb`` are PDGEMM's: ``\"N\"`` (as is), ``\"T\"`` (transpose) or ``\"C\"`` "
        "(conjugate transpose)."
    ),
    "matmul: c must not be a transposed view (.T, .H): C is written into, and a view's blocks are a copy; pass a "
    "matrix": (
        "``c`` was ``x.T`` or ``x.H``: a view of ``x`` whose blocks, once read, are a moved copy, so a product "
        "written there would never reach ``x``. Pass a matrix of shape ``(m, n)`` (``DistMatrix.zeros``), or "
        "compute ``x.T @ ...`` and take the result's ``.T``."
    ),
    "np.asarray of a …: it is distributed; .gather() (collective) gives the whole of it on rank 0, .local this "
    "rank's block": (
        "``np.asarray``, ``np.array`` (or a NumPy function that converts its argument) was given a "
        "``DistMatrix`` or ``DistVector``: no rank holds the whole of it, and NumPy would silently make a 0-d "
        "object array. Call ``.gather()`` on every rank (the whole array arrives on rank 0, ``None`` "
        "elsewhere: small arrays only), or work on ``.local``, this rank's block (``rows``, ``cols`` or ``span`` "
        "say which part it is)."
    ),
    "… …: combine with a scalar or a … of the same shape and grid (….from_global distributes an array)": (
        "A distributed matrix or vector was combined with a NumPy or CuPy array: the array is whole on each rank, "
        "the matrix is in blocks, so there is no elementwise meaning. Distribute the array first "
        "(``DistMatrix.from_global(array, a.grid)``), or combine ``.local`` with the matching block "
        "(``array[a.rows, a.cols]``) yourself."
    ),
    "…: the operands differ: … and … (elementwise needs one shape, layout and grid)": (
        "``+``, ``-``, ``*`` or ``/`` between two distributed matrices (or vectors) needs the same global shape "
        "and the same process grid (and, for vectors, the same layout), so that each rank's blocks are the same "
        "elements: the message names both. Move one onto the other's grid (``b.redistribute(a.grid)``, "
        "``x.as_layout(y.layout)``) or fix the shape."
    ),
    "CyclicMatrix: nb must be an int >= 1, got …": (
        "``CyclicMatrix(local, gshape, grid, nb)`` was given a block size that is not a positive integer. "
        "Give the ``nb`` the blocks were dealt with; ``DistMatrix.to_cyclic(nb)`` makes a matrix in this layout "
        "from a DistMatrix without building the blocks by hand."
    ),
    "CyclicMatrix: local blocks have shape …, expected … for … on grid … with nb …": (
        "The array given to ``CyclicMatrix(local, gshape, grid, nb)`` is not this rank's share of the "
        "block-cyclic layout: ``numroc(m, nb, grid.row, pr) x numroc(n, nb, grid.col, pc)`` "
        "(``hpcgpu.linalg.cyclic.numroc``, ScaLAPACK's ``NUMROC``). Check ``nb`` and the grid, or make the matrix "
        "with ``DistMatrix.to_cyclic``."
    ),
    "CyclicMatrix @: SUMMA multiplies DistMatrix blocks: c.to_distmatrix() @ ...": (
        "``@`` was applied to a block-cyclic matrix. SUMMA reads the block layout: multiply "
        "``c.to_distmatrix()`` (one ``Alltoallv``), and keep the ``CyclicMatrix`` for the factorizations."
    ),
    "CyclicMatrix.T: a block-cyclic matrix has no transpose view: c.to_distmatrix().T is one, and its "
    ".to_cyclic() the transpose in this layout": (
        "A ``CyclicMatrix`` keeps no transpose view (a DistMatrix's ``.T`` is read by ``matmul`` and the "
        "solvers without a move; a block-cyclic one would need one). Take ``c.to_distmatrix().T``, and "
        "``.to_cyclic()`` of that for the transpose kept in the factorizations' layout."
    ),
    "CyclicMatrix.H: a block-cyclic matrix has no transpose view: c.to_distmatrix().H is one, and its "
    ".to_cyclic() the transpose in this layout": (
        "As for ``.T``: take ``c.to_distmatrix().H`` (a view), and ``.to_cyclic()`` of it for the conjugate "
        "transpose in the factorizations' layout."
    ),
    "matmul: … is a CyclicMatrix (block-cyclic, the factorizations' layout): ….to_distmatrix() is the DistMatrix "
    "SUMMA multiplies": (
        "``hpcgpu.matmul`` was given a ``CyclicMatrix`` (made by ``DistMatrix.to_cyclic``). SUMMA reads and "
        "writes the block layout: pass ``c.to_distmatrix()`` (one ``Alltoallv``)."
    ),
    "…: one operand's blocks are in host memory, the other's on the device": (
        "One matrix's blocks are NumPy arrays and the other's CuPy arrays (made with different ``xp=``). Make "
        "both on one side: pass the same ``xp`` when creating them, or rebuild one with "
        "``DistMatrix(cupy.asarray(b.local), b.gshape, b.grid)``."
    ),
    "…: … and … give …, not one of …": (
        "NumPy's promotion of the two operands' types gives a dtype a DistMatrix does not hold (an integer or "
        "no common type, such as float16 with bfloat16). Convert one operand first "
        "(``a.astype(\"float32\")``)."
    ),
    "…: the result is …, the operand …: x = x … y makes a new one": (
        "An in-place operator (``+=``, ``-=``, ``*=``, ``/=``) would change the matrix's dtype (a complex "
        "scalar added to a real matrix, a float64 matrix into a float32 one), which an in-place operation "
        "cannot. Write ``a = a + x`` for a new matrix of the promoted dtype, or convert first (``a.astype``)."
    ),
    "DistMatrix … on a transposed view (.T, .H) would change a copy, not its matrix: write v = v … x, or change "
    "the matrix itself": (
        "``a.T`` and ``a.H`` are views: nothing is moved when they are taken, and their blocks, once read, are "
        "a moved copy of ``a``. An in-place operator on a view would change that copy and not ``a``, so it is "
        "refused. Change ``a`` itself (``a *= 2`` doubles ``a.T`` too), or write ``v = v * 2`` for a new one."
    ),
    "…: layout must be 'rows' or 'cols', got …": (
        "A ``DistVector`` is laid out as a matrix's rows (``\"rows\"``: split over the grid rows, what "
        "``A @ x`` gives) or as its columns (``\"cols\"``: split over the grid columns, what ``A @ x`` takes). "
        "Give one of the two."
    ),
    "DistVector: local piece has shape …, expected … for … elements along the … of grid …": (
        "``DistVector(local, n, grid, layout)`` was given a piece of the wrong length: each rank holds "
        "``grid.cols(n)`` (layout ``cols``) or ``grid.rows(n)`` (layout ``rows``) of the vector. Make the "
        "piece that long, or use ``DistVector.from_global`` or ``DistVector.zeros``."
    ),
    "DistVector.zeros: n must be a length (an integer >= 0), got …": (
        "``DistVector.zeros(n, grid, layout, dtype)`` takes the vector's global length first: a whole number, 0 "
        "or more."
    ),
    "DistVector.from_global: expected a 1-D array, got shape …": (
        "The root's array is not one-dimensional. Pass ``x.ravel()`` for a vector; a matrix goes to "
        "``DistMatrix.from_global``."
    ),
    "DistVector.from_global: root must be a rank of the grid (0 to …), got …": (
        "``root`` is the rank (in the grid's communicator) that holds the array: an integer from 0 to the "
        "number of ranks less one."
    ),
    "DistVector.from_matrix: a must be an n x 1 DistMatrix, got …": (
        "Only a one-column ``DistMatrix`` is a vector. Take a column first, or pass ``a.T`` for a one-row "
        "matrix (moved when read)."
    ),
    "DistMatrix @ …: multiply by a DistMatrix or a DistVector (their from_global distributes an array)": (
        "``a @ b`` with a distributed matrix on the left and a NumPy or CuPy array on the right: the array is "
        "whole on each rank, the matrix in blocks. Distribute it first (``DistMatrix.from_global(b, a.grid)``, "
        "or ``DistVector.from_global(x, a.grid)`` for a vector)."
    ),
    "DistMatrix @ DistVector: shapes do not conform: … x … and a vector of …": (
        "``A @ x`` needs ``x`` as long as ``A`` has columns (``A.T @ x``: as ``A`` has rows). Check which "
        "operand is transposed."
    ),
    "DistMatrix @ DistVector: different grids (… and …)": (
        "The matrix and the vector are on different process grids. Make the vector on the matrix's grid "
        "(``DistVector.from_global(x, a.grid)``)."
    ),
    "DistMatrix @ DistVector: dtypes differ: … and … (x.astype(a.dtype))": (
        "A matrix-vector product takes one dtype for both, as ``matmul`` does. Convert the vector "
        "(``x.astype(a.dtype)``) or the matrix."
    ),
    "…: the vectors differ: … and …": (
        "``x.dot(y)`` and ``x.vdot(y)`` need two ``DistVector`` of one length on one grid (either layout: "
        "``y`` is moved to ``x``'s). The message names both."
    ),
    "…: … and … have no common dtype of a DistVector": (
        "The two vectors' dtypes promote to no dtype a DistVector holds (float16 with bfloat16). Convert one "
        "(``y.astype(x.dtype)``)."
    ),
    "norm: ord must be None, 2, 1, inf or -inf for a vector, got …": (
        "A vector's norms are the 2-norm (None or 2), the sum of absolute values (1) and the largest or "
        "smallest absolute value (inf, -inf)."
    ),
    "norm: ord must be None, 'fro', 1, -1, inf or -inf for a matrix, got …": (
        "A matrix's norms here are Frobenius (None, ``'fro'``) and the largest or smallest column (1, -1) or "
        "row (inf, -inf) sum of absolute values. The 2-norm and the nuclear norm need singular values, which "
        "hpcgpu does not compute for a distributed matrix; the Frobenius norm bounds the 2-norm from above."
    ),
    "norm: x must be a DistMatrix or a DistVector, got …": (
        "``hpcgpu.linalg.norm`` takes distributed arrays; for a NumPy array use ``numpy.linalg.norm``."
    ),
    "…: A is … x …; served: tall or square A (m >= n >= 1) whose n x n R fits one rank (TSQR)": (
        "``hpcgpu.linalg.qr``, ``lstsq`` (``pdgels``) and ``svd`` factor by TSQR: row blocks over the ranks and a "
        "tree of ``n x n`` R factors, so A must have at least as many rows as columns (and at least one column). "
        "A wide A (an underdetermined ``lstsq``) is not served: factor its conjugate transpose (``a.H``) instead, "
        "or gather a small one and use SciPy."
    ),
    "qr: mode must be 'reduced', 'economic', 'r' or 'full', got …": (
        "``mode='reduced'`` (or SciPy's word ``'economic'``) gives Q ``m x n`` and R ``n x n``; ``'r'`` gives "
        "``(R,)`` and forms no Q; ``'full'`` is served for a square A only."
    ),
    "qr: mode 'full' (Q of … x …) is not served for a tall A (… x …); mode 'reduced' gives Q … x … and R … x …": (
        "A full Q of a tall matrix is ``m x m``, most of it a basis of the space A does not reach; TSQR forms "
        "only the ``m x n`` Q of the columns of A. Use ``mode='reduced'``."
    ),
    "svd: full_matrices=True (U of … x …) is not served for a tall A (… x …); full_matrices=False gives U … x …": (
        "As for ``qr``'s mode ``'full'``: the tall-skinny SVD forms the ``m x n`` U of A's columns only. Pass "
        "``full_matrices=False``."
    ),
    "svd: … must be True or False, got …": (
        "``full_matrices`` and ``compute_uv`` are switches: pass a bool, the same on every rank."
    ),
    "lstsq: cond must be None or a finite number >= 0, got …": (
        "``cond`` is the relative cutoff for A's singular values (those at most ``cond * s[0]`` count as zero "
        "and set the rank); ``None`` takes the dtype's machine epsilon, as SciPy does."
    ),
    "…: the SVD of R did not converge (…)": (
        "LAPACK's SVD of the small ``n x n`` R (on rank 0, broadcast to every rank) failed to converge, which "
        "happens only for pathological values (finite ones are checked on entry). Scale A, or compute in "
        "float64."
    ),
    # -- Task farm ----------------------------------------------------------------------------------------
    "task … returned results …, the first result had …: the function must return the same names for every task": (
        "Every task's dict becomes one row of the same datasets in ``/results``, so the names are fixed by "
        "the first result that arrived. This task returned other keys. Make the function return the same "
        "keys every time (use NaN or 0 for a value a task has none of); the farm stops with exit 2 and keeps "
        "what finished in the journal."
    ),
    (
        "task …: result … is …, the first result's was …: the function must return the same dtypes for every "
        "task (shapes may vary: they are stored ragged)"
    ): (
        "One result changed its dtype from the first task's (an int where a float came first, a string where "
        "a number came first). Return the same type for a name in every task: cast (``float(x)``, "
        "``numpy.asarray(x, float)``). A shape that varies is fine: such a result is stored ragged "
        "(:doc:`guide/tasks`, the output). The sweep stops with exit 2 and the journal keeps the finished "
        "tasks; ``--resume`` after the fix runs the tasks not yet done."
    ),
    (
        "task …: result … is …, the results kept from … are …: the function changed since; rerun with … to "
        "start afresh"
    ): (
        "A resume ran the function on the tasks not yet done, and it now returns a result of another dtype "
        "than the results the earlier run stored (the function was edited between the runs). The file is "
        "not written. Put the function back as it was to go on, or start afresh with ``--overwrite`` "
        "(``overwrite=True``) and run every task with the new function. A result that only changed shape is "
        "stored ragged with the kept ones, not refused."
    ),
    (
        "task … returned results …, the results kept from … are …: the function changed since; rerun with … "
        "to start afresh"
    ): (
        "A resume ran the function on the tasks not yet done, and it now returns other result names than "
        "the earlier run stored. The file is not written. Put the function back as it was to go on, or start "
        "afresh with ``--overwrite`` (``overwrite=True``)."
    ),
    "…: cannot write the results (…); the journal keeps them: --resume": (
        "Rank 0 could not write the HDF5 results file at the end (or at a periodic write): disk full, quota, "
        "the directory removed or made read-only. Nothing finished is lost: every finished task is in "
        "``OUT.journal``. Free the space or fix the directory, then rerun the same command with "
        "``--resume``; it writes the file from the journal and runs only what was not done."
    ),
    (
        "[rank …] error: … is still running … s after its --timeout of … s (stuck in a native call that "
        "ignores signals?): aborting the job; the finished tasks are in the journal, rerun with --resume"
    ): (
        "A task ran past ``--timeout`` and did not stop when SIGALRM raised ``TaskTimeout`` in it: it is "
        "inside a native call (a C extension, a blocking library call) that does not return to Python. The "
        "watchdog aborts the whole job a grace period later rather than leave the rank stuck. Rerun with "
        "``--resume``: the finished tasks are kept. Make the task's native calls interruptible (smaller "
        "pieces, their own time limit), or raise ``--timeout`` if the task only needs longer."
    ),
    "--flush-seconds must be a number of seconds > 0, got …": (
        "``--flush-seconds`` bounds how much finished work a killed job can lose, and must be a positive, "
        "finite number of seconds (default 2)."
    ),
    "--progress must be one of …, got …": (
        "``hpcgpu.tasks.map(progress=...)`` was given an unknown mode (the command line's choices catch it "
        "earlier). Use ``auto``, ``bar``, ``lines`` or ``none``."
    ),
    "--retries must be an integer >= 0, got …": (
        "``--retries`` is the number of further attempts at a task that raised or timed out: a whole number, "
        "0 or more."
    ),
    "--timeout must be a number of seconds > 0, got …": (
        "``--timeout`` is the most seconds one task attempt may run and must be positive and finite. Leave "
        "it out for no limit."
    ),
    "fn: expected a callable, got …": (
        "``hpcgpu.tasks.map(fn, params)`` takes the function first; something else was passed (often the "
        "arguments swapped). Pass the function object, not its result or name."
    ),
    "resume needs out: the file of the earlier run": (
        "``hpcgpu.tasks.map(..., resume=True)`` continues an earlier sweep from its output file, so ``out=`` "
        "must name it."
    ),
    "timeout: needs the main thread (SIGALRM)": (
        "The per-task ``timeout`` uses ``SIGALRM``, which Python delivers only to the main thread, and "
        "``hpcgpu.tasks.map`` was called from another thread. Call it from the main thread, or drop "
        "``timeout``."
    ),
    "…: columns … do not fit …(…): …": (
        "Each row is passed as ``FUNCTION(**row)``, so every column must be a parameter of the function and "
        "every parameter without a default must be a column; Python's reason follows. Rename the columns of "
        "the parameter file, or add parameters (or ``**kwargs``) to the function."
    ),
    "…: expected MODULE:FUNCTION (e.g. mypkg.sims:run or sims.py:run)": (
        "The first argument of ``python -m hpcgpu.tasks`` names the task function as a module and a "
        "function separated by a colon: ``mypkg.sims:run`` (a module on the path) or ``sims.py:run`` (a "
        "file)."
    ),
    "…: importing … failed: …: …": (
        "Your module raised an exception while being imported (its type and first line follow). Run "
        "``python -c 'import MODULE'`` (or ``python FILE.py``) on the node to see the whole traceback, and "
        "fix it or install what it needs in the job's environment."
    ),
    "…: module … has no attribute …": (
        "The module imported, but has no function of that name. Check the spelling after the colon, and "
        "that the module imported is yours and not another of the same name earlier on ``sys.path``."
    ),
    "…: no module named …": (
        "Python cannot find the module (or a module it imports, which is named). Run from the directory "
        "that holds it, add it to ``PYTHONPATH``, give the file as ``path/to/sims.py:run``, or install the "
        "missing package in the job's environment."
    ),
    "…: no such file …": (
        "The task function is given as a ``.py`` file that does not exist on this node. Give the path "
        "relative to the directory the job starts in (Slurm: the submit directory) or an absolute one, on a "
        "file system every node sees."
    ),
    "…: … is a …, not a function": (
        "The name after the colon is a module attribute that cannot be called (a number, a string, a "
        "submodule). Name the function itself."
    ),
    "timed out after … s": (
        "Not a job error: a task ran longer than ``--timeout``, was interrupted in its rank (``TaskTimeout`` "
        "raised in it) and recorded as failed (``TaskTimeout: timed out after …`` in ``/tasks/error``); the "
        "rank goes on with the next task, and the sweep exits with status 4. Raise "
        "``--timeout``, or use ``--retries``; rerun the failed ones with ``--resume``. A task stuck in native "
        "code that ignores the signal aborts the job after a grace period."
    ),
    "….journal: …": (
        "With ``--resume`` the journal beside the output (``OUT.journal``) is replayed, and a record in it "
        "does not fit (the reason follows: usually its results differ in names or shapes from the others, "
        "because the function changed). Rerun without ``--resume`` to start afresh, or restore the function "
        "that wrote it."
    ),
    "… line 1: the header has an empty or repeated column name: …": (
        "A CSV parameter file starts with a header row of column names, each non-empty and different. Fix "
        "the header (a trailing comma makes an empty name)."
    ),
    "… line …: column … is empty": (
        "Every field of a CSV task row must have a value. Fill it in (or remove the row); a trailing comma "
        "adds an empty field."
    ),
    "… line …: expected an object {\"name\": value, ...}, got …": (
        "Each line of a JSON-lines parameter file must be one JSON object mapping parameter names to "
        "values, e.g. ``{\"beta\": 0.3, \"gamma\": 0.1}``; this line is a list, number or string. A whole JSON "
        "array in one file is not JSON lines: write one object a line."
    ),
    "… line …: not JSON (…)": (
        "This line of the JSON-lines file does not parse (the reason follows). Common causes: single "
        "quotes, a trailing comma, Python's ``True``/``None`` instead of ``true``/``null``, an object spread "
        "over several lines."
    ),
    "… line …: … fields, the header has …": (
        "A CSV row has more or fewer fields than the header: a missing or extra comma, or a value with a "
        "comma that needs quotes (``\"1,2\"``)."
    ),
    "…: column … holds lists of different shapes": (
        "A column of lists must hold lists of one shape (each becomes a row of one array). Make them equal "
        "in length, or split the column."
    ),
    "…: column … is not a Python identifier (each column is passed to the function as a keyword argument)": (
        "Column names become keyword arguments, so they must be valid Python names: letters, digits and "
        "underscores, not starting with a digit (``learning_rate``, not ``learning-rate``). Rename the "
        "column and the function's parameter."
    ),
    "…: column … is not numeric (dtype …)": (
        "A column of lists must hold numbers (or booleans). Convert the values, or store them as strings "
        "and parse them in the function."
    ),
    (
        "…: column … mixes types or holds null/objects (expected numbers, booleans, strings, or lists of numbers of "
        "one shape)"
    ): (
        "Each column becomes one array, so its values must be of one kind: all numbers, all booleans, all "
        "strings, or lists of numbers of one shape. Replace nulls and nested objects, and quote numbers "
        "consistently."
    ),
    "…: columns of different lengths …": (
        "A mapping of columns (``{name: values}``) passed to ``hpcgpu.tasks.map`` must give every column "
        "the same number of values, one per task."
    ),
    "…: dataset … has dtype … (expected numbers or strings)": (
        "An HDF5 parameter file holds one dataset per parameter, of numbers or strings; this one has a "
        "compound or other type. Store each parameter as its own numeric or string dataset."
    ),
    "…: dataset … is a scalar (the first axis must be the task)": (
        "In an HDF5 parameter file each dataset's first axis is the task. Store a constant as an array of "
        "one value per task, or give it as a default of the function instead."
    ),
    "…: empty file (expected a header row, then one row a task)": (
        "The CSV parameter file is empty (or only blank lines). Write a header row of parameter names, then "
        "one row per task."
    ),
    "…: empty file (expected one JSON object a line)": (
        "The JSON-lines parameter file is empty (or only blank lines). Write one object per task, one a "
        "line."
    ),
    "…: expected a file name, a mapping of columns or a list of dicts, got …": (
        "``hpcgpu.tasks.map(fn, params)`` takes the tasks as a file name, a dict of columns "
        "(``{\"x\": [1, 2, 3]}``) or a list of dicts (``[{\"x\": 1}, ...]``)."
    ),
    "…: expected one mapping (dict) per task": (
        "A list of tasks passed to ``hpcgpu.tasks.map`` must hold one dict per task, with the same keys."
    ),
    "…: is a directory": (
        "``--params`` names a directory. Give the parameter file itself (``.csv``, ``.jsonl`` or ``.h5``)."
    ),
    "…: keys … differ from the first row's …": (
        "Every task (JSON line or dict) must have the same parameter names as the first one. Add the "
        "missing keys (or give the function defaults and add them with that value), or remove the extra "
        "ones."
    ),
    "…: no datasets (one dataset per parameter, in /params or at the root)": (
        "The HDF5 parameter file has no datasets in ``/params`` (or at the root when there is no "
        "``/params`` group). Write one dataset per parameter there."
    ),
    "…: no parameters (no columns)": (
        "The tasks have no parameters at all. Each task needs at least one column, passed to the function "
        "as a keyword argument."
    ),
    "…: no tasks": (
        "The list of tasks passed to ``hpcgpu.tasks.map`` is empty. Give at least one."
    ),
    "…: no tasks (no rows)": (
        "The parameter table has columns but zero rows. Give at least one task."
    ),
    "…: no tasks (only a header)": (
        "The CSV parameter file has a header but no task rows. Add one row per task."
    ),
    "…: not UTF-8 text (… at byte …)": (
        "CSV and JSON-lines parameter files are read as UTF-8; this one is in another encoding (e.g. "
        "Latin-1 or UTF-16 from a spreadsheet). Save it as UTF-8 (``iconv -f latin1 -t utf-8``)."
    ),
    "…: unknown format (expected .csv, .jsonl or .h5)": (
        "The format of the parameter file is taken from its suffix: ``.csv``; ``.jsonl``, ``.ndjson`` or "
        "``.json`` (one object a line); ``.h5``, ``.hdf5`` or ``.he5``. Rename the file accordingly."
    ),
    "task … returned an empty dict": (
        "The task function must return a dict with at least one result. Return e.g. "
        "``{\"peak\": peak}``. The sweep stops with status 2; the finished tasks are kept in the journal, so "
        "fix the function and rerun with ``--resume``."
    ),
    "task … returned …, not a dict of numbers and arrays": (
        "The task function must return a dict of named results (numbers, booleans, strings or numeric "
        "arrays), e.g. ``return {\"peak\": peak, \"curve\": curve}``. The sweep stops with status 2; fix "
        "the function and rerun with ``--resume``."
    ),
    "task …: result name … is not usable as an HDF5 dataset name": (
        "Result names become dataset names under ``/results``: non-empty strings without ``/`` and not "
        "``.``. Rename the key in the function's returned dict, then rerun with ``--resume``."
    ),
    "task …: result … is … (dtype …): expected a number, a boolean, a string or a numeric array": (
        "A result value cannot be stored in HDF5 (an object, ``None``, a list of mixed types). Return "
        "numbers, booleans, strings or numeric arrays (``numpy.asarray(x, float)``); keep a CuPy array's "
        "result as ``cupy.asnumpy(x)`` or a float."
    ),
    "…: written by a sweep of …, not … (… instead of resume starts afresh)": (
        "``--resume`` found an output (or journal) written by a sweep of another task function. Use the "
        "same ``MODULE:FUNCTION`` as the earlier run, another ``-o``, or ``--overwrite`` instead of "
        "``--resume`` to replace it."
    ),
    "…: written by a sweep over other parameters than … (… instead of resume starts afresh)": (
        "``--resume`` found an output (or journal) of a sweep over another parameter table (a different "
        "file content or number of tasks). Resume with the original parameter file, use another ``-o``, or "
        "``--overwrite`` instead of ``--resume`` to replace it."
    ),
    "… holds … finished task… of this sweep: … continues them, … starts afresh": (
        "The output (or its journal) holds tasks an earlier run of this same sweep finished, and the "
        "command asked neither to continue nor to start afresh: a plain rerun would have discarded them. "
        "Add ``--resume`` (``resume=True``) to keep them and run the rest (a requeued job script does so "
        "itself), or ``--overwrite`` (``overwrite=True``) to run every task again. Nothing was touched."
    ),
    "… holds … finished task… of …: … replaces them (or write to another …)": (
        "The output (or its journal) holds tasks finished by a sweep of another function or over other "
        "parameters. Write this sweep to another ``-o`` (``out``), or give ``--overwrite`` "
        "(``overwrite=True``) to replace that sweep's results. Nothing was touched."
    ),
    # -- Files and directories ----------------------------------------------------------------------------
    "…: is a directory, not an HDF5 file": (
        "The path given for an HDF5 input (``--data``, a matrix, a checkpoint) is a directory. Give the file "
        "inside it: ``--data data/fmnist.h5``, not ``--data data/``."
    ),
    "… …: cannot write in … (…)": (
        "Before any work, rank 0 checks that it can create a file in the directory of the output named "
        "(``--out`` or ``--checkpoint`` of the trainer, ``-o`` of ``matmul`` and the task farm; the "
        "directory is created if missing) and could not (the reason follows: permission denied, read-only "
        "or full file system). Choose a writable directory, e.g. on your scratch file system."
    ),
    "… …: is a directory": (
        "The option names an existing directory, but it must name a file. Add a file name "
        "(``--out results/train.h5``, not ``--out results``)."
    ),
    (
        "… …: … is not the same directory on every node (rank … on … does not see a file rank 0 on … made there): "
        "outputs and checkpoints must be on a file system that every node shares"
    ): (
        "On a job over several hosts rank 0 made a probe file in the output's directory and the rank named "
        "could not see it: the directory is node-local there (``/tmp``, a local scratch disk). Every rank "
        "writes into or reads from that file, and a requeued job must find its checkpoint on any node, so "
        "put outputs and checkpoints on a shared file system (home, project or parallel scratch)."
    ),
    "…: no such file": (
        "An input file (``--data``, a matrix, the trainer output given to ``hpcgpu.report``, ``--params``) "
        "does not exist at that path on the rank that checked. Check the spelling, and that the path is "
        "valid in the job's working directory (Slurm starts in the submit directory) and on every node."
    ),
    "…: not a readable HDF5 file (…)": (
        "The file exists but h5py cannot open it (HDF5's reason follows): it is not HDF5 (CSV, NumPy "
        "``.npy``), truncated by an interrupted copy, or locked by a writer still running. Convert it to "
        "HDF5 or copy it again; on a parallel file system whose locking fails, set "
        "``HDF5_USE_FILE_LOCKING=FALSE``."
    ),
    "…: cannot create (…)": (
        "Without parallel HDF5, rank 0 first creates the output's dataset in the temporary file beside it, "
        "and could not (the reason follows: usually a full disk or quota). The output path is left as it "
        "was; free space, or give another output."
    ),
    "…: parallel write failed (…)": (
        "With h5py built for parallel HDF5, every rank writes its block of the output through the MPI-IO "
        "driver, and that failed (the reason follows). Check the free space, and that the directory is on a "
        "file system that supports MPI-IO from every node (Lustre, GPFS; not always NFS). The output path is "
        "left as it was."
    ),
    "…: rank … cannot write its block (…)": (
        "Without parallel HDF5 the ranks write their blocks into the temporary output file one after "
        "another, and the rank named could not open or write it. Usually the directory is not the same on "
        "that rank's node: put the output on a shared file system; else check the free space."
    ),
    # -- Launch, runtime and GPUs -------------------------------------------------------------------------
    "blas_threads must be 'auto', a positive int or None, got …": (
        "``hpcgpu.init(blas_threads=...)`` takes ``\"auto\"`` (each rank its share of the node's cores, unless a "
        "variable the BLAS reads says otherwise), a positive number of threads, or ``None`` to leave the "
        "process's BLAS as it is (a science code that sets its own threads)."
    ),
    "no default communicator yet: call hpcgpu.init() first (collective), or pass comm=": (
        "A collective, a process grid or an agreement was asked for without ``comm=`` before the runtime "
        "existed: the default communicator is the runtime's, made by :func:`hpcgpu.init`. Call "
        "``rt = hpcgpu.init()`` first on every rank (it is collective), or pass the communicator explicitly."
    ),
    "module 'hpcgpu' has no attribute …": (
        "The name is not part of hpcgpu (a typo, or a name of another version). ``dir(hpcgpu)`` lists the names, "
        "the trainer's and the task farm's among them (they are imported on first use)."
    ),
    "module 'hpcgpu.train' has no attribute …": (
        "The name is not part of ``hpcgpu.train`` (a typo, or a name of another version). ``dir(hpcgpu.train)`` "
        "lists its names (each is imported on first use)."
    ),
    "module 'hpcgpu.tasks' has no attribute …": (
        "The name is not part of ``hpcgpu.tasks`` (a typo, or a name of another version). ``dir(hpcgpu.tasks)`` "
        "lists its names (each is imported on first use)."
    ),
    (
        "hpcgpu: stall: … (…) has waited … s (stall timeout … s); ranks … have not arrived, ranks … are "
        "waiting…; aborting the job"
    ): (
        "The stall watchdog's report, from rank 0: some ranks have waited longer than the stall timeout in "
        "one collective (named, with the phase) that the listed ranks never reached; a rank is stuck (a "
        "deadlock, a hung file system, a GPU that stopped answering) or died without the launcher noticing. "
        "A rank named as waiting in another collective has arrived elsewhere (a barrier lets a rank leave "
        "once it has heard from every rank, so with one rank stopped another may already wait in the next "
        "collective, or still in the one before): the ranks that have not arrived are waiting nowhere. "
        "The job is aborted so that it does not hang until its time limit. Look at what the missing ranks "
        "were doing (their last lines, the node they ran on); if the work between collectives is really that "
        "long, raise ``--stall-timeout`` (or ``HPCGPU_STALL_TIMEOUT``, seconds; 0 turns the watchdog off)."
    ),
    "--batch-size, --features and --classes must be >= 1": (
        "``python -m hpcgpu info --hidden ...`` times the trainer's GEMMs for a model and batch described by "
        "these options, which must all be positive."
    ),
    "cublasGemmEx: no CUDA data type for …": (
        "An internal check of the 16-bit GEMM path: only float32, float16 and bfloat16 operands should reach "
        "``cublasGemmEx``. No input should cause it; please report it with the job's stderr."
    ),
    "gemm: c must be C-contiguous": (
        "An internal check of the device GEMM: hpcgpu writes into C-contiguous outputs only. No input "
        "should cause it; please report it with the job's stderr."
    ),
    "staging slot … is held by a request not yet waited for; give each request in flight its own slot": (
        "Without CUDA-aware MPI a non-blocking collective on a device array (``Ibcast``, ``Iallreduce``) "
        "stages through a pinned host buffer that stays held until ``Wait``; the ``slot=`` given is still "
        "held by an earlier request. Wait for that request first, or give each request in flight its own "
        "``slot`` (or none: each then takes a free one)."
    ),
    "--device gpu: …": (
        "``--device gpu`` was asked for and some rank has no usable GPU; the first such rank and CuPy's "
        "reason follow (the reason alone when it is the same on every rank). Common reasons: *CuPy is not "
        "installed* (``pip install -e '.[gpu]'`` in the clone of hpcgpu), *no CUDA device visible* (the job did "
        "not ask for GPUs: ``--gpus-per-task=1`` or ``--gres=gpu:N``; ``CUDA_VISIBLE_DEVICES`` empty), *not "
        "usable* (a CUDA library such as NVRTC missing: install ``cupy-cuda12x[ctk]`` or load the CUDA module). "
        "See *GPU not found* above; ``--device auto`` would fall back to the CPU instead."
    ),
    (
        "the launcher started … processes (…=…) but MPI sees a world of 1 in each: this mpiexec is not the one of "
        "mpi4py's MPI library (…); launch with that library's mpiexec"
    ): (
        "The ``mpiexec`` found first on ``PATH`` belongs to another MPI than the one mpi4py was built with "
        "(for example MPICH's or Intel MPI's Hydra starting a Python whose mpi4py uses Open MPI): each "
        "process starts alone, and the job would run N times over. Use the ``mpiexec`` beside the Python "
        "(``.venv/bin/mpiexec``, or the module of the MPI that mpi4py was built against); ``python -m hpcgpu "
        "info`` names the library. ``HPCGPU_IGNORE_SLURM_NTASKS=1`` turns the check off."
    ),
    (
        "Slurm started … tasks (SLURM_STEP_NUM_TASKS=…) but MPI sees a world of 1 in each: the launcher did not "
        "connect the ranks (srun --mpi=none?); launch with srun --mpi=pmi2 (or the plugin your MPI needs) or mpiexec"
    ): (
        "Under ``srun`` every task started its own one-rank MPI job, so the job would run N times over. "
        "``srun`` did not speak your MPI's process-management interface (``--mpi=none``, or the wrong "
        "plugin). Launch with ``srun --mpi=pmi2`` (MPICH, Intel MPI) or ``srun --mpi=pmix`` (Open MPI; "
        "``srun --mpi=list`` shows what your Slurm has), or with ``mpiexec -n $SLURM_NTASKS``. "
        "``HPCGPU_IGNORE_SLURM_NTASKS=1`` switches the check off for deliberate one-rank tasks."
    ),
    "device must be 'auto', 'cpu' or 'gpu', got …": (
        "``hpcgpu.init(device=...)`` was given another value. Use ``\"auto\"``, ``\"cpu\"`` or ``\"gpu\"``."
    ),
    "collectives must be 'auto', 'nccl' or 'mpi', got …": (
        "``hpcgpu.init(collectives=...)`` was given another value: use ``\"auto\"``, ``\"nccl\"`` or "
        "``\"mpi\"``."
    ),
    "--collectives must be auto, nccl or mpi, got …": (
        "``TrainConfig(collectives=...)`` was given another value: use ``auto``, ``nccl`` or ``mpi``."
    ),
    "collectives='nccl' needs a GPU on every rank, and the device is the cpu": (
        "NCCL moves device buffers only: drop ``--collectives nccl`` on the CPU, or run with ``--device gpu``."
    ),
    "collectives='nccl': …": (
        "NCCL was asked for and cannot serve (the reason follows: ranks sharing a GPU, which NCCL refuses, or "
        "no NCCL library): give each rank a GPU of its own (``--ntasks-per-node`` = GPUs per node), install "
        "``nvidia-nccl-cu12``/``-cu13`` (the ``gpu`` extras do), or use ``--collectives auto``."
    ),
    "NCCL: …": (
        "A rank could not load NCCL when its first device collective needed it: install "
        "``nvidia-nccl-cu12``/``-cu13`` on every node, or run with ``--collectives mpi``."
    ),
    "NCCL: no communicator of … ranks could be made (…)": (
        "``ncclCommInitRank`` failed (NCCL's words follow); rerun with ``NCCL_DEBUG=WARN`` to see why, most "
        "often two ranks on one GPU or a network interface NCCL cannot reach (``NCCL_SOCKET_IFNAME``)."
    ),
    "hpcgpu: NCCL error on rank …: …; aborting the job": (
        "A NCCL collective failed, reported an asynchronous error (a peer died, the network broke) or did not "
        "complete within the stall timeout, and the job was ended so no rank hangs: read the rank's other "
        "lines, and rerun with ``NCCL_DEBUG=WARN``."
    ),
    "… must be 0 or 1 (or no/yes, false/true, off/on), got …": (
        "The override named (``HPCGPU_CUDA_AWARE_MPI`` or ``HPCGPU_NONBLOCKING_DEVICE``) is set to "
        "something other than an on/off value. Set it to ``1`` or ``0`` (``yes``/``no``, ``true``/``false``, "
        "``on``/``off`` also work), or unset it to let hpcgpu detect it."
    ),
    # -- Collectives --------------------------------------------------------------------------------------
    "Alltoallv: counts … / … do not fit buffers of … and … elements over … ranks": (
        "``hpcgpu.comm.Alltoallv`` needs one send and one receive count per rank, summing to no more than "
        "the buffers' sizes. Check the counts (length ``comm.size``) and allocate the receive buffer for "
        "their sum. This check is local: other ranks may wait, so run under the command-line guard or the "
        "stall watchdog."
    ),
    "Iallreduce: no MPI sums …; use Allreduce, which reduces it in float32": (
        "MPI has no sum for float16 or bfloat16. ``hpcgpu.comm.Allreduce`` widens such buffers to float32 and "
        "back; the non-blocking ``Iallreduce`` cannot. Use ``Allreduce``, or keep the buffer in float32."
    ),
    "Reduce_scatter_block: no MPI sums …": (
        "MPI has no sum for float16 or bfloat16. Reduce the buffer in float32 (``buf.astype(\"float32\")``)."
    ),
    "Reduce_scatter_block: sendbuf of … elements is not … blocks of …": (
        "``Reduce_scatter_block`` takes a send buffer of exactly ``comm.size`` blocks of the receive "
        "buffer's size. Pad the send buffer to ``comm.size * recvbuf.size``."
    ),
    (
        "a collective on a device array needs the runtime's decision on CUDA-aware MPI: call hpcgpu.init() first, or "
        "pass cuda_aware=True/False"
    ): (
        "hpcgpu's collectives need to know whether they can hand a device pointer to MPI, which ``init()`` "
        "decides. Call ``hpcgpu.init()`` before the first collective on a CuPy array, or pass "
        "``cuda_aware=`` explicitly."
    ),
    "buffers of one collective must all be host arrays or all device arrays": (
        "A collective was given a NumPy array and a CuPy array together. Put both on the same side "
        "(``cupy.asarray`` or ``cupy.asnumpy``)."
    ),
    "… must be C-contiguous": (
        "MPI reads a buffer as one contiguous block, so the array named must be C-contiguous. Pass "
        "``xp.ascontiguousarray(a)`` (and copy the result back into a strided view yourself)."
    ),
    # -- Run report and performance model -----------------------------------------------------------------
    "hpcgpu.report: error: needs matplotlib (pip install matplotlib)": (
        "The run report draws its plots with matplotlib, which is not installed. Install the ``report`` "
        "extra (``pip install -e '.[report]'`` in the clone of hpcgpu, or ``pip install matplotlib``)."
    ),
    "hpcgpu.report: error: …": (
        "``python -m hpcgpu.report`` could not read a trainer output or write the report; the reason follows "
        "(see its own entry). It exits with status 2."
    ),
    "…: not an output of python -m hpcgpu.train (no /metrics)": (
        "The report reads the trainer's output (``--out``), which has ``/metrics``; this file is something "
        "else (a checkpoint, the data set). Pass the file given to ``--out``."
    ),
    "hpcgpu.scaling: error: …": (
        "One of the scaling study's runs failed, or its output directory cannot be made; the reason "
        "follows. It exits with status 2."
    ),
    "… failed (exit …): …": (
        "A run started by ``python -m hpcgpu.scaling`` (a training run or a microbenchmark at P ranks) "
        "exited with the status shown and the last line of its stderr. Run that command by hand to see all "
        "of it; at more ranks than cores Open MPI must be allowed to oversubscribe, and ``HPCGPU_MPIEXEC`` "
        "chooses the launcher."
    ),
    "--trace …: cannot write (…)": (
        "Rank 0 could not write the Chrome trace file (the reason follows). The trace is written when "
        "training has finished but before ``--out``, so the output is missing too. Choose a writable path "
        "for ``--trace``; with a checkpoint path, rerun with ``--resume``, which continues from the final "
        "checkpoint and only writes the files."
    ),
    # -- The output policy, inputs, and options added with it (issue 41) ------------------------------
    '--lr-gamma must be in (0, 1], got …': (
        '``--lr-gamma`` is the factor ``--schedule step`` multiplies the learning rate by every '
        '``--lr-step-epochs``: a number in (0, 1] (0.1 divides it by ten). NaN, zero, a negative or infinite '
        'value would make the learning rate meaningless, and the divergence it causes would look like a bad '
        '``--lr``.'
    ),
    '--seed must be in [0, 2**63), got …': (
        "``--seed`` seeds NumPy's generator (initial weights, every epoch's order), which takes a "
        'non-negative integer below 2**63. Give a non-negative integer.'
    ),
    '--warmup-epochs must be finite, got …': (
        '``--warmup-epochs`` is the length of the linear warm-up in epochs (a fraction is fine, 0 turns it '
        'off); ``inf`` or ``nan`` would keep the learning rate at its start for ever. Give a finite number >='
        ' 0.'
    ),
    'predict …:…: cannot be read (…)': (
        '``Trainer.predict`` (or ``python -m hpcgpu.train predict --data``) was given an HDF5 '
        '``FILE:DATASET`` it cannot read: no such dataset in the file, a group in its place, or a damaged '
        "file; HDF5's reason follows. Name a 2-D dataset of the file (``data.h5:/test/X``)."
    ),
    'save_checkpoint: give a path (the trainer was made without checkpoint= or out=)': (
        "``Trainer.save_checkpoint()`` without a path writes to the trainer's checkpoint path, and this "
        'trainer has none (neither ``checkpoint=`` nor ``out=`` was given). Pass the file: '
        "``trainer.save_checkpoint('run.ckpt.h5')``."
    ),
    '…: a dangling symbolic link (to …)': (
        'An input (``--data``, ``--model``, a matrix of ``matmul``) is a symbolic link whose target does not '
        "exist; the target is named. Point the link at the file, or give the file's own path."
    ),
    '…: a virtual dataset whose source file … cannot be read (…)': (
        'An input dataset is an HDF5 virtual dataset, and one of its source files exists but HDF5 cannot open'
        " it (damaged, or not HDF5); HDF5's reason follows. Its rows would read as fill values, so it is "
        'refused before any work: repair or regenerate the source file.'
    ),
    '…: a virtual dataset whose source file … is missing (its rows would read as fill values)': (
        'An input dataset is an HDF5 virtual dataset (VDS) whose source file is missing: HDF5 reads the '
        'missing rows as the fill value (zeros) without an error, so training or a product would silently use'
        ' zeros. hpcgpu looks for the source as HDF5 does (absolute, under ``$HDF5_VDS_PREFIX``, beside the '
        'file) and refuses the input naming the missing file. Put the source file back where the VDS expects '
        'it, or set ``HDF5_VDS_PREFIX`` to its directory.'
    ),
    '…: a virtual dataset whose source …:… is missing': (
        'An input dataset is an HDF5 virtual dataset whose source file exists but no longer holds the source '
        'dataset it names: its rows would read as fill values. Regenerate the source dataset or the virtual '
        'dataset.'
    ),
    '…: is …, not an HDF5 file': (
        'An input (``--data``, ``--model``, a matrix) is a FIFO (named pipe), a device or a socket. Opening a'
        ' FIFO blocks until someone writes to it, so hpcgpu refuses it without opening it. Give a regular '
        'HDF5 file; to stream data through a pipe, write it to a file first.'
    ),
    ('hpcgpu.scaling: error: --ranks must be positive integers like 1,2,4; --epochs, --sizes >= 2; '
     '--repeat, --extend >= 1'): (
        'An option of ``python -m hpcgpu.scaling`` is out of range: ``--ranks`` a comma-separated list of '
        'positive integers, ``--epochs`` and ``--sizes`` at least 2 (the first epoch is left out, the model '
        'is fitted to two sizes at least), ``--repeat`` and ``--extend`` at least 1.'
    ),
    'hpcgpu.scaling: error: needs matplotlib for its plot (pip install matplotlib)': (
        '``python -m hpcgpu.scaling`` ends with a plot; it checks for matplotlib before it runs anything, so '
        "no run is wasted. Install it (``pip install 'hpcgpu[report]'`` or ``pip install matplotlib``)."
    ),
    'Output.kind must be one of …, got …': (
        "A program built on hpcgpu's output policy declared an output of an unknown kind. Use one of "
        '``hdf5``, ``json``, ``text``, ``png``, ``journal``.'
    ),
    "an output's path cannot be encoded (…)": (
        "An output's path holds characters the file system's encoding cannot store. Choose a path in the file"
        " system's encoding (``LANG``), or plain ASCII."
    ),
    '… …:…: cannot create a temporary file beside it (…)': (
        "A dataset is written into ``FILE`` by copying the file's other objects into a temporary file beside "
        'it, then renaming it over ``FILE``; creating that temporary failed (a full disk or quota, no '
        'permission in the directory); the reason follows. ``FILE`` is as it was: free space, or write '
        'elsewhere.'
    ),
    '… …:…: cannot rename (…)': (
        'The finished temporary file could not be renamed over the output (the directory became read-only, or'
        ' another process removed the temporary); the reason follows. The output is as it was; run again.'
    ),
    '…: a dangling symbolic link (to …): remove it or write elsewhere': (
        'An output path is a symbolic link whose target does not exist. Writing there would replace the link '
        'with a file, which is rarely what was meant: remove the link, point it at an existing file, or '
        'choose another output.'
    ),
    '…: cannot be looked at (…)': (
        'hpcgpu could not ``stat`` an output path (no permission on a directory above it, a stale network '
        'mount); the reason follows. Fix the permissions or choose another path.'
    ),
    '…: exists and is … hpcgpu did not write: it is not replaced (--overwrite replaces it)': (
        'An output names an existing file that hpcgpu did not write: a Python source, a CSV, an HDF5 file of '
        'another program, a trace of another tool. Every file hpcgpu writes carries its mark (the '
        '``hpcgpu_version`` attribute of an HDF5 file, ``written by hpcgpu`` in a JSON, Markdown or PNG '
        'file), and only those are replaced. Choose another path, or give ``--overwrite`` (``overwrite=True``'
        ' in the library) to replace the file.'
    ),
    '…: is also an input (… …); writing it would replace what is read: choose another output': (
        "An output is one of the run's own inputs (the data, the model, a matrix, the parameter table, the "
        "task's module), or the same dataset of one. Writing it would destroy what the run reads. Choose "
        'another file, or another dataset of the same file (``predict -o data.h5:/y_hat`` beside ``/X`` is '
        'fine). An input is every file it reads: ``, through the external link ext.h5:/train/X`` (or a '
        'virtual dataset, or a soft link) names the link in the input that leads into the output.'
    ),
    '… …: a dangling symbolic link (to …): nothing to read': (
        'An input (a matrix of ``matmul``, ``--data``, ``--params``) is a symbolic link whose target does not '
        "exist; the target is named. Point the link at the file, or give the file's own path."
    ),
    '…: is being written by another job (…): wait for it to end, or write elsewhere': (
        'Another run (its host and process id are named) holds this output: every run holds its outputs, '
        'checkpoints and journals for its whole duration through a lock file ``.NAME.lock`` beside each, so '
        'two jobs never write one file (two ``matmul -o shared.h5:C1`` and ``:C2`` at once kept only one '
        "dataset). Wait for that job to end, or write elsewhere. A lock file left by a killed job holds no "
        'lock and is taken by the next run; on a file system without working locks see :ref:`outputs-locks`.'
    ),
    '…: cannot open its lock file … (…)': (
        "The output's lock file ``.NAME.lock`` exists (another user's run made it) and cannot be opened even "
        "to read; the reason follows. Ask its owner, or write elsewhere."
    ),
    '…: cannot create its lock file … (…)': (
        "The output's lock file ``.NAME.lock`` cannot be created beside it; the reason follows (a directory "
        'one can write files in but not create new ones in, a quota on inodes). Write elsewhere.'
    ),
    '…: cannot lock its lock file … (…)': (
        "The output's lock file ``.NAME.lock`` opened but ``flock`` on it failed for a reason other than a file "
        'system without locks (an ``Input/output error`` of an NFS lock daemon); the reason follows. Nothing was '
        'written. Run again once the file system is well, or write elsewhere.'
    ),
    ('…: its name is too long to write: hpcgpu writes .NAME.XXXXXXXX.tmp beside it first, … bytes where … allows '
     '…; give a name of at most … bytes'): (
        'Every output is written to a temporary ``.NAME.XXXXXXXX.tmp`` beside it and renamed, and that name '
        "is 14 bytes longer than the output's: the directory's file system (``NAME_MAX``, 255 bytes on most) "
        'cannot hold it. Refused before any work (it failed after the whole training). Give a shorter name.'
    ),
    '…: …: nothing was written (free some space, or write elsewhere)': (
        'The disk (or the quota: ``Disk quota exceeded``; or the file size limit: ``File too large``) has no '
        'room for this output. A dataset added to a file reserves its space before HDF5 writes it, so the '
        'file is as it was and no temporary is left. Free space, or write elsewhere, and run again.'
    ),
    '…: nothing was written': (
        'A file hpcgpu writes whole (a results file, a checkpoint, a trace, a report\'s PNG or Markdown) met a '
        'full disk or quota (``No space left on device: nothing was written``, after the file\'s name). The '
        'temporary is removed and the earlier file, if any, is as it was. Free space, or write elsewhere.'
    ),
    '… …:…: cannot reserve its space on the disk (…)': (
        'Before HDF5 writes a dataset into a file, its space is allocated (``posix_fallocate``), and that '
        'failed for another reason than a full disk; the reason follows. The file is as it was.'
    ),
    '…: is also …: one would replace the other; give each output its own file': (
        'Two outputs of one run name the same file (``--out r.h5 --checkpoint r.h5``, ``--out r.h5 --trace '
        'r.h5``): the second written would replace the first. Give each its own file.'
    ),
    '…: is …, not a file hpcgpu can replace: write elsewhere': (
        'An output path is a FIFO, a device or a socket. hpcgpu writes every output to a temporary file and '
        'renames it, which would replace that special file; it refuses without opening it. Write to a regular'
        ' file.'
    ),
    '…: warning: removed …, a temporary file of … that a killed writer left': (
        'Not an error: an earlier run was killed (SIGKILL, a node failure, a full disk) while it wrote this '
        'output, and left its temporary file ``.NAME.XXXX.tmp`` beside it. Every program removes such files '
        'of its own outputs before it starts; the output itself was never touched.'
    ),
    '…: … exists and is not a readable HDF5 file (…): it is not replaced; remove it or write elsewhere': (
        "A dataset is to be added to ``FILE`` (``-o FILE:DATASET``), and ``FILE`` has HDF5's signature but "
        "cannot be opened (damaged, or held by a writer without a lock); HDF5's reason follows. It is not "
        'replaced: repair or remove it, or write elsewhere.'
    ),
    '…: … exists and is not an HDF5 file: no dataset can be added to it (remove it or write elsewhere)': (
        '``-o FILE:DATASET`` adds a dataset to ``FILE``, keeping its other objects, and ``FILE`` exists but '
        'is not an HDF5 file (a CSV, a source file). It is not replaced: choose an HDF5 file or a new name.'
    ),
    '…: … exists in … and hpcgpu did not write it: it is not replaced (--overwrite replaces it)': (
        '``-o FILE:DATASET`` names a dataset that already exists in ``FILE`` and was not written by hpcgpu '
        '(it lacks the ``hpcgpu_version`` attribute): your data. Choose another dataset name, or give '
        '``--overwrite`` to replace it.'
    ),
    '…: … is a dataset in …, not a group: name another dataset': (
        '``-o FILE:a/b`` puts the output under ``a``, and ``a`` is a dataset in ``FILE``, which cannot hold '
        'other objects. Name another path (``FILE:a_b``, ``FILE:results/b``).'
    ),
    '…: … is a file, not a directory': (
        'An output path goes through a regular file as if it were a directory (``--out notes.txt/r.h5``). '
        'Choose a path whose directories are directories (missing ones are created).'
    ),
    '…: … is a … in …, not a dataset: it is not replaced; name another dataset': (
        '``-o FILE:NAME`` names a group of ``FILE`` (which holds other objects), not a dataset. It is not '
        'replaced: name a dataset (``FILE:NAME/y_hat``) or another path.'
    ),
    "…: rank … needs … GiB of device memory for its matrices, more than its GPU has (… GiB): …": (
        "On a GPU, the matrices of ``--bench N`` (``matmul``'s blocks of A, B and C; ``solve``'s, ``lstsq``'s "
        "and ``cholesky``'s A, its working copies, B and X; and, on rank 0, the one-process reference's whole "
        "matrices) live in the rank's device memory, which holds less than they need. It is refused before "
        "anything is allocated: give a smaller N."
    ),
    "…: the ranks of a node need … GiB for their blocks, more than its memory (… GiB): …": (
        "A matrix (``matmul``'s A, B or C, ``hpcgpu.DistMatrix.from_hdf5``), the MLP of ``info --hidden`` or the "
        "matrices of ``matmul --bench N`` declare more data than the ranks of one node can hold in memory (the "
        "node's memory, or its cgroup's limit under Slurm). It is refused before anything is allocated. Do what "
        "the line says: spread the job over more nodes, run fewer ranks per node, or check the dataset's "
        "declared shape (a typo in a generator); for ``--bench``, give a smaller N (rank 0 also holds the "
        "three N x N matrices of its one-process reference)."
    ),
    "… …: cannot write its journal ….journal (…)": (
        "The task farm keeps a journal beside ``-o`` (``OUT.journal``) so that a killed sweep loses at most "
        "``--flush-seconds`` of results, and it could not create it (a full disk or quota, no permission); the "
        "reason follows. No task ran and ``OUT`` is as it was: free space or write elsewhere."
    ),
    "--retry-failed must be True or False, got …": (
        "``retry_failed`` of :func:`hpcgpu.tasks.map` is a switch: with ``resume=True``, run the earlier "
        "run's failed tasks again (by default they stay failed). Pass ``True`` or ``False``."
    ),
    "isolate must be True, False or 'auto', got …": (
        "``isolate`` of :func:`hpcgpu.tasks.map` says where tasks run: ``True`` in a child process of each "
        "working rank (a task that ends its process fails alone), ``False`` in the rank's own process, "
        "``'auto'`` (the default) in the child process where ``fn`` can reach it."
    ),
    "isolate: … cannot run in a task process: … (define it at the top level of a module, or pass isolate=False)": (
        "With ``isolate=True`` the task function must be importable by the child process that runs it: a "
        "function defined at the top level of a module (or of a file given as ``sims.py:run``). A lambda, a "
        "nested function or a function of ``__main__`` is not. Move it to a module, or pass "
        "``isolate=False`` (or ``'auto'``, which runs such a function in the rank's own process)."
    ),
    "hpcgpu.datasets: error: …": (
        "``python -m hpcgpu.datasets`` could not make the data set: the reason follows (a missing source "
        "directory for fashion-mnist, scikit-learn not installed for digits, ``--out FILE: cannot write`` for a "
        "full disk or quota). Nothing is left at ``--out`` but what was there."
    ),
    "--data …: the attribute num_classes must be an integer >= 2, got …": (
        "The data file's root attribute ``num_classes`` fixes the model's number of classes, and it is not a "
        "whole number of at least 2 (a string such as ``'three'``, a fraction). Write it as an integer, "
        "``f.attrs['num_classes'] = 3``, or delete it to take the classes from ``/train/y``."
    ),
    "…: row … holds …, not a whole number of int64's range: class labels must be integers 0..C-1": (
        "``--task classification`` (``task='classification'``) was given with float labels, which are accepted "
        "when every one is a whole number (a CSV's export of integer classes); this one is not. Check the "
        "labels, or train a regression (``--task regression``) if they are values."
    ),
    ("…: the validation labels hold …, outside the training set's classes 0..…: a model of … classes cannot "
     "predict it"): (
        "The model's classes are those of the training set (``/train/y``, or the ``num_classes`` attribute), and "
        "a validation label (``/test/y``, ``validation=``) lies outside them: a model of C classes can never "
        "predict it, and the accuracy would be wrong without a word. Relabel both sets together "
        "(``numpy.unique(y, return_inverse=True)``), or set ``num_classes`` to the true count."
    ),
    # -- The boundary of library errors: a model's contract after its first step, saved models, variables ------
    "… (at step …, rank …)": (
        "A model of one's own (or an autograd adapter) broke its contract at a later step than the first, on the "
        "rank named (the lowest of those that did): the message before the parentheses says how (a gradient of "
        "another size, a parameter's gradient missing). The gradient's write into the trainer's flat buffer "
        "failed there; the other ranks learn it from the step's own gradient ``Allreduce`` (the rank makes its "
        "loss sum NaN) and every rank raises the same line, at no cost to a step that keeps the contract. Fix "
        "``loss_and_grad`` so that every call, on every rank, returns every parameter's gradient in its shape "
        "(a branch taken only at some steps or on some ranks is the usual cause)."
    ),
    "[rank …] error: …": (
        "As the line above, on a GPU run whose reduced loss sums stay on the device (NCCL): no rank can learn of "
        "another's broken contract without a collective of its own every step, so the rank that found it ends "
        "the job (``MPI_Abort``) with this one line naming itself. Fix the model as above."
    ),
    "model …: loss_and_grad's result could not be taken (…: …)": (
        "A model of one's own returned something whose gradient or loss sum could not be written into the "
        "trainer's buffers although its names and shapes were right (a loss sum that is a string or an array "
        "of several numbers, a gradient of another type). Return the loss sum as a float (or a 0-d array) and "
        "each gradient as an array of its parameter's shape."
    ),
    "model …: dtype … is not a NumPy type": (
        "``FlatModel(model, dtype=...)`` was given a type NumPy does not know. Give ``\"float64\"`` or "
        "``\"float32\"``."
    ),
    "Torch: … returned a …, not a tensor: its forward must return the outputs as one tensor, (n, k) or (n,)": (
        "The module given to ``nn.Torch`` returns a tuple, a dict or something else than one tensor from its "
        "``forward``. The trainer hands that tensor to the loss and scores it; wrap the module so that it "
        "returns the one output the loss takes (``lambda x: module(x)[0]`` as a ``torch.nn.Module``)."
    ),
    ("Torch: the loss returned a …, not a tensor: loss(outputs, y) must return the sum over the samples as a 0-d "
     "tensor"): (
        "The loss given to ``nn.Torch`` returns a Python number (``.item()``, ``float(...)``) or another object: "
        "autograd needs the tensor. Return the loss tensor itself, summed over the samples "
        "(``torch.nn.MSELoss(reduction=\"sum\")``)."
    ),
    ("Torch: the loss returned a tensor of shape …, not one number: loss(outputs, y) must return the sum over the "
     "samples (reduction=\"sum\")"): (
        "The loss given to ``nn.Torch`` returns one value a sample (``reduction=\"none\"``, or a function without "
        "its ``.sum()``). hpcgpu needs the sum over the micro-batch, which it divides by the global batch once: "
        "add ``.sum()`` or give the loss module ``reduction=\"sum\"``."
    ),
    "Dense takes integer sizes, got Dense(…, …)": (
        "``nn.Dense`` was given a size that is not an integer (``4.5``, ``\"64\"``). Give whole numbers: "
        "``Dense(64, 10)``, or ``Dense(10)`` to take the input width from the layer before or the data."
    ),
    "Huber's delta must be a number > 0, got …": (
        "``nn.Huber(delta)`` was given something other than a number. Give the threshold between the quadratic "
        "and the linear part as a positive number, ``nn.Huber(1.0)``."
    ),
    "layer sizes must be a sequence of integers [D, h_1, ..., C], got …": (
        "``nn.relu_stack`` (or ``nn.MLP``) takes a list of integer widths, the inputs' first and the outputs' "
        "last; it was given a string or numbers of another type. Write ``relu_stack([784, 256, 10])``."
    ),
    "a layer's description must be a JSON object, got …": (
        "``nn.from_spec`` (what ``load_model`` uses to rebuild the layers a results file records) was given "
        "something other than a dict. Give it what ``Layer.spec()`` returned, or load the model with "
        "``hpcgpu.load_model``."
    ),
    "the description of a … layer has no …": (
        "A layer's description (a results file's ``model`` attribute, or a dict given to ``nn.from_spec``) "
        "lacks a part that layer needs (``n_in`` and ``n_out`` for a ``Dense``, ``layers`` for a "
        "``Sequential``). The file was edited or written by another program: train it again, or give the "
        "missing part."
    ),
    "a loss's description must be a JSON object, got …": (
        "``nn.loss_from_spec`` was given something other than a dict. Give it what ``Loss.spec()`` returned."
    ),
    ("… …: its model description (the model and config attributes) is not a JSON object: not a results file of "
     "python -m hpcgpu.train"): (
        "``load_model`` or ``predict --model`` read a results file whose ``model`` or ``config`` attribute is "
        "not a JSON object (not JSON at all, or a list): the file was not written by hpcgpu's trainer, or was "
        "changed since. Give the results file a training run wrote (``--out``, ``save_results``)."
    ),
    "… …: its model description has no …: the file was not written by python -m hpcgpu.train, or was changed since": (
        "The results file's model description lacks a part hpcgpu needs to rebuild the model (its ``loss``, its "
        "``net``). Give the results file a training run wrote, unchanged; a model of one's own is rebuilt by its "
        "own code and ``Trainer.load_weights``."
    ),
    "… …: its model description is not one of hpcgpu's layers and loss (…)": (
        "The results file's model description names layers or a loss in a form hpcgpu does not build (the "
        "reason follows in parentheses). Give the results file a training run wrote, unchanged."
    ),
    "… …:… holds …: these weights predict nothing": (
        "The weights in the dataset named hold NaN or an infinity: every prediction would be NaN. A run that "
        "diverged is refused before it writes a results file, so the file was written otherwise or changed "
        "since. Train again (a smaller learning rate), or load the weights of an earlier good run."
    ),
    "… must be … or …, got …": (
        "The environment variable named takes one of the words listed (``HPCGPU_DEVICE``: ``auto``, ``cpu`` "
        "or ``gpu``), and another was set. Every ``HPCGPU_*`` variable is checked when ``hpcgpu.init`` starts, "
        "whether or not the run would read it. Set one of the words, or unset the variable."
    ),
    "-o …: the dataset's name ends in '/' (an empty name in group …): name the dataset, e.g. -o …:…": (
        "``matmul -o FILE:NAME/`` names a group, not a dataset: HDF5 has no dataset of an empty name. Leave "
        "out the trailing ``/`` (``-o C.h5:results/C``)."
    ),
    "ProcessGrid: comm must be an mpi4py.MPI.Intracomm, got …": (
        "``ProcessGrid(comm=...)`` was given something other than an MPI communicator. Give an "
        "``mpi4py.MPI.Intracomm`` (``rt.comm`` of ``hpcgpu.init()``), or leave it out for the runtime's own."
    ),
    "… must be integers, got …": (
        "A ``ProcessGrid`` method or its ``dims`` was given sizes or positions that are not integers "
        "(``\"4\"``, ``2.5``). Give Python or NumPy integers; ``parse_grid(\"2x3\")`` reads the command line's "
        "``ROWSxCOLS`` form."
    ),
    "… must be two integers, got …": (
        "A grid's ``dims`` or a global shape was given as something other than two integers (``\"2x2\"``, three "
        "numbers). Give a pair, ``ProcessGrid((2, 2))``, ``grid.block((m, n))``."
    ),
    "…: grid must be a ProcessGrid, got …": (
        "A ``DistMatrix`` constructor was given a ``grid`` that is not a ``hpcgpu.ProcessGrid`` (a string like "
        "``\"2x1\"``). Make one, ``hpcgpu.ProcessGrid((2, 1))``, or leave ``grid`` out for the default grid."
    ),
    "redistribute: grid must be a ProcessGrid, got …": (
        "``DistMatrix.redistribute`` takes the ``hpcgpu.ProcessGrid`` to move the matrix onto. Make one over "
        "the same ranks, ``hpcgpu.ProcessGrid((1, P))``."
    ),
    "random: seed must be an integer >= 0, got …": (
        "``DistMatrix.random`` seeds NumPy's generator with an integer, the same on every rank. Give one, "
        "``seed=1``."
    ),
    "…: path must be a str or os.PathLike, got …": (
        "``DistMatrix.from_hdf5`` or ``to_hdf5`` was given a path that is not a string or a ``pathlib.Path``. "
        "Give the file's path."
    ),
    "…: name must be a dataset's name (str), got …": (
        "``DistMatrix.from_hdf5`` or ``to_hdf5`` was given a dataset name that is not a string. Give the "
        "dataset's path in the file, ``\"A\"`` or ``\"/group/A\"``."
    ),
    "matmul: … must be a number, got …": (
        "``hpcgpu.matmul``'s ``alpha`` or ``beta`` is not a number (a string, a list). Give a Python or NumPy "
        "scalar: ``alpha=2.0``."
    ),
    "matmul: … must be an integer, got …": (
        "``hpcgpu.matmul``'s ``panel`` (the panel width in columns) or ``replication`` (2.5-D's layers) is not "
        "an integer. Give a whole number, or leave it out for the default."
    ),
    "matmul: … must be a number of bytes > 0, got …": (
        "``hpcgpu.matmul``'s ``panel_memory`` or ``memory_limit`` is in bytes: give a positive number "
        "(``256 * 2**20``), not a string like ``\"256M\"``."
    ),
    "matmul: … must be a dict to fill, or None, got …": (
        "``hpcgpu.matmul`` fills the dict given as ``timings`` or ``stats`` with its figures. Give an empty dict "
        "(``t = {}; matmul(A, B, timings=t)``), or leave it out."
    ),
    "Standardize: mean and std must be arrays of numbers, got … and …": (
        "``nn.Standardize(mean, std)`` was given something other than numbers (strings, objects). Give the "
        "features' means and standard deviations as arrays of one number a feature, or neither (the trainer "
        "computes them from the data)."
    ),
    "model …: seed must be an integer, got …": (
        "``FlatModel(model, seed=...)`` seeds the generator handed to ``model.init``: give an integer."
    ),
    "check_grad: eps and rtol must be numbers, got … and …": (
        "``nn.check_grad``'s step ``eps`` and tolerance ``rtol`` are numbers (``eps=1e-6``, ``rtol=1e-4``). "
        "Like every error of ``check_grad`` it is the calling rank's own (it may run on rank 0 alone)."
    ),
    "check_grad: x and y must be arrays of numbers, got … and …": (
        "``nn.check_grad(model, x, y)`` evaluates the model on ``x`` and ``y``: give arrays of numbers (a few "
        "rows of the training data), not strings or objects."
    ),
    "Jax: … returned a …, not an array: apply must return the outputs as one array, (n, k) or (n,)": (
        "The ``apply`` given to ``nn.Jax`` returns a tuple, a dict or something else than one array. The trainer "
        "hands that array to the loss and scores it: return the one output the loss takes (checked once, while "
        "JAX traces the function)."
    ),
    "Jax: the loss returned …, not one number: loss(outputs, y) must return the sum over the samples": (
        "The loss given to ``nn.Jax`` returns one value a sample (or something other than an array): "
        "``jax.value_and_grad`` needs the one number, the sum over the micro-batch. Add ``.sum()``."
    ),
}
