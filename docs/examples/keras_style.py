# run: mpiexec -n 2
"""The program Keras users write first: Sequential + Adam + cross-entropy from logits, on the digits."""
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import hpcgpu
from hpcgpu import nn, optim

rt = hpcgpu.init(device="cpu")
X, y = load_digits(return_X_y=True)  # every rank: the whole set (1,797 images of 8 x 8); each takes its block
X_train, X_test, y_train, y_test = train_test_split(X / 16.0, y, test_size=0.2, random_state=0)

model = nn.Sequential(nn.Dense(64, 128, activation="relu"), nn.Dense(128, 10))
trainer = hpcgpu.Trainer(model, nn.SoftmaxCrossEntropy(), optim.Adam(lr=1e-3), batch_size=32, epochs=5, seed=0,
                         dtype="float64", runtime=rt, progress="none")
history = trainer.fit((X_train, y_train), validation=(X_test, y_test))  # per epoch, global means
logits = trainer.predict(X_test)  # rank 0: (360, 10) in the order of X_test; the other ranks: None
trainer.close()

if rt.rank == 0:
    for e, loss, acc, val in zip(history["epoch"], history["train_loss"], history["train_accuracy"],
                                 history["val_accuracy"], strict=True):
        print(f"epoch {e}: loss {loss:.3f}  accuracy {acc:.3f}  val_accuracy {val:.3f}")
    print(f"predictions {logits.shape}: {logits.argmax(axis=1)[:12].tolist()}")
    print(f"labels:            {y_test[:12].tolist()}")
