"""A small MNIST-style CNN trained on synthetic data of MNIST's shape, written against PyTorch's API.

Prints ``step N loss X`` per step and ``done`` at the end (tests/test_mock_torch.py reads them).
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, 1)
        self.conv2 = nn.Conv2d(8, 16, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(16 * 12 * 12, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
        return F.log_softmax(self.fc2(x), dim=1)


def synthetic_mnist(n, seed):
    # images whose class is visible: class k lights up row band k, so a few steps learn something
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (n,), generator=g)
    images = torch.rand(n, 1, 28, 28, generator=g) * 0.3
    for i in range(n):
        k = int(labels[i])
        images[i, 0, 2 * k + 4 : 2 * k + 6, :] = 1.0
    return TensorDataset((images - 0.1307) / 0.3081, labels)


def main():
    parser = argparse.ArgumentParser(description="MNIST-style example")
    parser.add_argument("--batch-size", type=int, default=32, metavar="N")
    parser.add_argument("--epochs", type=int, default=2, metavar="N")
    parser.add_argument("--lr", type=float, default=1.0, metavar="LR")
    parser.add_argument("--gamma", type=float, default=0.7, metavar="M")
    parser.add_argument("--no-cuda", action="store_true", default=False)
    parser.add_argument("--no-mps", action="store_true", default=False)
    parser.add_argument("--seed", type=int, default=1, metavar="S")
    parser.add_argument("--num-samples", type=int, default=128)
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--save-model", default="", help="path to save the state_dict to")
    args = parser.parse_args()

    use_cuda = not args.no_cuda and torch.cuda.is_available()
    use_mps = not args.no_mps and torch.backends.mps.is_available()
    torch.manual_seed(args.seed)
    if use_cuda:
        device = torch.device("cuda")
    elif use_mps:
        device = torch.device("mps")
    else:
        device = torch.device("cpu")

    train_loader = DataLoader(
        synthetic_mnist(args.num_samples, args.seed),
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.num_workers,
    )
    model = Net().to(device)
    optimizer = optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    step = 0
    for epoch in range(1, args.epochs + 1):
        model.train()
        for data, target in train_loader:
            data, target = data.to(device), target.to(device)
            optimizer.zero_grad()
            loss = F.nll_loss(model(data), target)
            loss.backward()
            optimizer.step()
            print(f"step {step} loss {loss.item():.6f}", flush=True)
            step += 1
        scheduler.step()
        print(f"epoch {epoch} lr {scheduler.get_last_lr()[0]:.4f}")
    if args.save_model:
        torch.save(model.state_dict(), args.save_model)
    print("done")


if __name__ == "__main__":
    main()
