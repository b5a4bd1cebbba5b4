"""A small DCGAN on synthetic 16x16 images, written against PyTorch's API.

Prints ``step N loss_D X loss_G Y`` per step and ``done`` at the end.
"""

import argparse

import torch
import torch.nn as nn
import torch.optim as optim


def weights_init(m):
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        torch.nn.init.normal_(m.weight, 0.0, 0.02)
    elif classname.find("BatchNorm") != -1:
        torch.nn.init.normal_(m.weight, 1.0, 0.02)
        torch.nn.init.zeros_(m.bias)


class Generator(nn.Module):
    def __init__(self, nz, ngf, nc):
        super().__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(nz, ngf * 4, 4, 1, 0, bias=False),  # 4x4
            nn.BatchNorm2d(ngf * 4),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False),  # 8x8
            nn.BatchNorm2d(ngf * 2),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 2, nc, 4, 2, 1, bias=False),  # 16x16
            nn.Tanh(),
        )

    def forward(self, input):
        return self.main(input)


class Discriminator(nn.Module):
    def __init__(self, ndf, nc):
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv2d(nc, ndf, 4, 2, 1, bias=False),  # 8x8
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False),  # 4x4
            nn.BatchNorm2d(ndf * 2),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 2, 1, 4, 1, 0, bias=False),  # 1x1
            nn.Sigmoid(),
        )

    def forward(self, input):
        return self.main(input).view(-1, 1).squeeze(1)


def main():
    parser = argparse.ArgumentParser(description="DCGAN example")
    parser.add_argument("--batchSize", type=int, default=16)
    parser.add_argument("--nz", type=int, default=8)
    parser.add_argument("--ngf", type=int, default=8)
    parser.add_argument("--ndf", type=int, default=8)
    parser.add_argument("--niter", type=int, default=8, help="number of steps")
    parser.add_argument("--lr", type=float, default=0.0002)
    parser.add_argument("--beta1", type=float, default=0.5)
    parser.add_argument("--manualSeed", type=int, default=999)
    args = parser.parse_args()
    torch.manual_seed(args.manualSeed)
    nc = 1

    netG = Generator(args.nz, args.ngf, nc)
    netG.apply(weights_init)
    netD = Discriminator(args.ndf, nc)
    netD.apply(weights_init)
    criterion = nn.BCELoss()
    fixed_noise = torch.randn(args.batchSize, args.nz, 1, 1)
    real_label, fake_label = 1, 0
    optimizerD = optim.Adam(netD.parameters(), lr=args.lr, betas=(args.beta1, 0.999))
    optimizerG = optim.Adam(netG.parameters(), lr=args.lr, betas=(args.beta1, 0.999))

    for step in range(args.niter):
        # "real" images: a bright square on a dark background, in [-1, 1] like Tanh's output
        real = torch.full((args.batchSize, nc, 16, 16), -0.8)
        real[:, :, 4:12, 4:12] = 0.8
        real = real + 0.1 * torch.randn_like(real)
        batch_size = real.size(0)

        # (1) update D: maximize log(D(x)) + log(1 - D(G(z)))
        netD.zero_grad()
        label = torch.full((batch_size,), real_label, dtype=real.dtype)
        output = netD(real)
        errD_real = criterion(output, label)
        errD_real.backward()
        D_x = output.mean().item()
        noise = torch.randn(batch_size, args.nz, 1, 1)
        fake = netG(noise)
        label.fill_(fake_label)
        output = netD(fake.detach())
        errD_fake = criterion(output, label)
        errD_fake.backward()
        errD = errD_real + errD_fake
        optimizerD.step()

        # (2) update G: maximize log(D(G(z)))
        netG.zero_grad()
        label.fill_(real_label)
        output = netD(fake)
        errG = criterion(output, label)
        errG.backward()
        optimizerG.step()
        print(f"step {step} loss_D {errD.item():.6f} loss_G {errG.item():.6f} D(x) {D_x:.4f}", flush=True)

    netG.eval()
    with torch.no_grad():
        sample = netG(fixed_noise).detach()
    assert sample.shape == (args.batchSize, nc, 16, 16)
    print("done")


if __name__ == "__main__":
    main()
