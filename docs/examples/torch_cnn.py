# run: python
"""A small convolutional network in PyTorch on the digits as 8 x 8 images: what the built-in layers cannot express."""
import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import hpcgpu
from hpcgpu import nn, optim

rt = hpcgpu.init(device="cpu")
X, y = load_digits(return_X_y=True)
images = (X / 16.0).reshape(-1, 1, 8, 8)  # (N, channels, height, width), as Conv2d takes them
X_train, X_test, y_train, y_test = train_test_split(images, y, test_size=0.2, random_state=0)

torch.manual_seed(0)
cnn = torch.nn.Sequential(
    torch.nn.Conv2d(1, 8, kernel_size=3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),  # 8 x 4 x 4
    torch.nn.Flatten(), torch.nn.Linear(8 * 4 * 4, 10)).double()
trainer = hpcgpu.Trainer(nn.Torch(cnn, torch.nn.CrossEntropyLoss(reduction="sum")), optimizer=optim.Adam(1e-2),
                         batch_size=32, epochs=4, seed=0, dtype="float64", runtime=rt, progress="none")
history = trainer.fit((X_train, y_train), validation=(X_test, y_test))  # each batch reaches cnn as (n, 1, 8, 8)
logits = trainer.predict(X_test)
trainer.close()
if rt.rank == 0:
    for e, (loss, acc) in enumerate(zip(history["train_loss"], history["val_accuracy"], strict=True), 1):
        print(f"epoch {e}: loss {loss:.3f}  val_accuracy {acc:.3f}")
    print(f"test accuracy {np.mean(logits.argmax(axis=1) == y_test):.3f}")
