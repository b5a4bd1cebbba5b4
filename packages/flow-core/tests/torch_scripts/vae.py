"""A variational auto-encoder on synthetic 28x28 data in [0, 1], written against PyTorch's API.

Prints ``step N loss X`` per step and ``done`` at the end.
"""

import argparse

import torch
import torch.utils.data
from torch import nn, optim
from torch.nn import functional as F


class VAE(nn.Module):
    def __init__(self, hidden=64, latent=8):
        super().__init__()
        self.fc1 = nn.Linear(784, hidden)
        self.fc21 = nn.Linear(hidden, latent)
        self.fc22 = nn.Linear(hidden, latent)
        self.fc3 = nn.Linear(latent, hidden)
        self.fc4 = nn.Linear(hidden, 784)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return mu + eps * std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, 784))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


def loss_function(recon_x, x, mu, logvar):
    bce = F.binary_cross_entropy(recon_x, x.view(-1, 784), reduction="sum")
    kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return bce + kld


def main():
    parser = argparse.ArgumentParser(description="VAE example")
    parser.add_argument("--batch-size", type=int, default=32, metavar="N")
    parser.add_argument("--epochs", type=int, default=3, metavar="N")
    parser.add_argument("--seed", type=int, default=1, metavar="S")
    parser.add_argument("--num-samples", type=int, default=128)
    args = parser.parse_args()
    torch.manual_seed(args.seed)

    # blobs on a dark background: a structure the decoder can learn in a few steps
    data = torch.rand(args.num_samples, 1, 28, 28) * 0.2
    data[:, :, 8:20, 8:20] += 0.7
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(data), batch_size=args.batch_size, shuffle=True)

    model = VAE()
    optimizer = optim.Adam(model.parameters(), lr=3e-3)
    step = 0
    for _ in range(args.epochs):
        model.train()
        for (x,) in loader:
            optimizer.zero_grad()
            recon, mu, logvar = model(x)
            loss = loss_function(recon, x, mu, logvar)
            loss.backward()
            optimizer.step()
            print(f"step {step} loss {loss.item() / len(x):.6f}", flush=True)
            step += 1
    model.eval()
    with torch.no_grad():
        sample = model.decode(torch.randn(4, 8))
        assert sample.shape == (4, 784)
    print("done")


if __name__ == "__main__":
    main()
