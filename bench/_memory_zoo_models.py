"""Model zoo for bench/memory_zoo.py: hand-written CNNs/RNNs/MLPs and transformers built from
configs with random init (nothing is downloaded)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass(frozen=True)
class ZooEntry:
    name: str
    build: Callable[[], nn.Module]
    make_batch: Callable[[int], Any]
    loss_fn: Callable[[Any, Any], torch.Tensor] | None
    batch_sizes: tuple[int, ...]
    quick: bool = False


def _xent(out: Any, batch: Any) -> torch.Tensor:
    return F.cross_entropy(out, batch[1])


class _Classifier(nn.Module):
    """Wraps a feature model so that ``model(x, y)`` ignores the label (loss_fn uses it)."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        return self.net(x)


def _images(channels: int, size: int, classes: int) -> Callable[[int], Any]:
    def make(bs: int) -> Any:
        return torch.randn(bs, channels, size, size), torch.randint(0, classes, (bs,))

    return make


# -- CNNs -----------------------------------------------------------------------------------------
def _conv_bn(cin: int, cout: int, stride: int = 1, groups: int = 1, k: int = 3) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.down = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            if stride != 1 or cin != cout
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.b1(self.c1(x)), inplace=True)
        out = self.b2(self.c2(out))
        return F.relu(out + self.down(x), inplace=True)


class Bottleneck(nn.Module):
    def __init__(self, cin: int, mid: int, stride: int) -> None:
        super().__init__()
        cout = mid * 4
        self.body = nn.Sequential(
            _conv_bn(cin, mid, k=1),
            _conv_bn(mid, mid, stride),
            nn.Conv2d(mid, cout, 1, bias=False),
            nn.BatchNorm2d(cout),
        )
        self.down = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            if stride != 1 or cin != cout
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.body(x) + self.down(x))


def resnet18(classes: int = 100) -> nn.Module:
    layers: list[nn.Module] = [_conv_bn(3, 64), nn.MaxPool2d(2)]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, classes)]
    return _Classifier(nn.Sequential(*layers))


def resnet50_narrow(classes: int = 100) -> nn.Module:
    layers: list[nn.Module] = [_conv_bn(3, 32, 2), nn.MaxPool2d(2)]
    cin = 32
    for mid, blocks, stride in ((16, 3, 1), (32, 4, 2), (64, 6, 2), (128, 3, 2)):
        for i in range(blocks):
            layers.append(Bottleneck(cin, mid, stride if i == 0 else 1))
            cin = mid * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    return _Classifier(nn.Sequential(*layers))


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        mid = cin * expand
        self.use_res = stride == 1 and cin == cout
        self.body = nn.Sequential(
            _conv_bn(cin, mid, k=1),
            _conv_bn(mid, mid, stride, groups=mid),
            nn.Conv2d(mid, cout, 1, bias=False),
            nn.BatchNorm2d(cout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x) if self.use_res else self.body(x)


def mobilenet_v2(classes: int = 100) -> nn.Module:
    layers: list[nn.Module] = [_conv_bn(3, 32, 2)]
    cin = 32
    for expand, cout, n, stride in (
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 2, 2),
        (6, 96, 2, 1),
    ):
        for i in range(n):
            layers.append(InvertedResidual(cin, cout, stride if i == 0 else 1, expand))
            cin = cout
    layers += [
        _conv_bn(cin, 640, k=1),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Dropout(0.2),
        nn.Linear(640, classes),
    ]
    return _Classifier(nn.Sequential(*layers))


class DenseLayer(nn.Module):
    def __init__(self, cin: int, growth: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.BatchNorm2d(cin),
            nn.ReLU(),
            nn.Conv2d(cin, 4 * growth, 1, bias=False),
            nn.BatchNorm2d(4 * growth),
            nn.ReLU(),
            nn.Conv2d(4 * growth, growth, 3, 1, 1, bias=False),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, self.body(x)], 1)


def densenet(classes: int = 100, growth: int = 16) -> nn.Module:
    layers: list[nn.Module] = [nn.Conv2d(3, 32, 3, 1, 1, bias=False)]
    cin = 32
    for i, n in enumerate((4, 6, 8)):
        for _ in range(n):
            layers.append(DenseLayer(cin, growth))
            cin += growth
        if i < 2:
            layers += [
                nn.BatchNorm2d(cin),
                nn.ReLU(),
                nn.Conv2d(cin, cin // 2, 1, bias=False),
                nn.AvgPool2d(2),
            ]
            cin //= 2
    layers += [nn.BatchNorm2d(cin), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    return _Classifier(nn.Sequential(*layers))


class UNet(nn.Module):
    def __init__(self, base: int = 16, classes: int = 4) -> None:
        super().__init__()
        chans = [base, base * 2, base * 4, base * 8]
        self.downs = nn.ModuleList()
        cin = 3
        for c in chans:
            self.downs.append(nn.Sequential(_conv_bn(cin, c), _conv_bn(c, c)))
            cin = c
        self.ups = nn.ModuleList()
        self.convs = nn.ModuleList()
        for c in reversed(chans[:-1]):
            self.ups.append(nn.ConvTranspose2d(cin, c, 2, 2))
            self.convs.append(nn.Sequential(_conv_bn(2 * c, c), _conv_bn(c, c)))
            cin = c
        self.head = nn.Conv2d(cin, classes, 1)

    def forward(self, x: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        skips = []
        for i, down in enumerate(self.downs):
            x = down(x if i == 0 else F.max_pool2d(x, 2))
            skips.append(x)
        for up, conv, skip in zip(self.ups, self.convs, reversed(skips[:-1]), strict=True):
            x = conv(torch.cat([up(x), skip], 1))
        return self.head(x)


def _seg_batch(bs: int) -> Any:
    return torch.randn(bs, 3, 64, 64), torch.randint(0, 4, (bs, 64, 64))


def vgg_small(classes: int = 10) -> nn.Module:
    cfg = (32, 32, "M", 64, 64, "M", 128, 128, "M")
    layers: list[nn.Module] = []
    cin = 3
    for v in cfg:
        if v == "M":
            layers.append(nn.MaxPool2d(2))
        else:
            layers.append(_conv_bn(cin, int(v)))
            cin = int(v)
    layers += [nn.Flatten(), nn.Linear(cin * 4 * 4, 256), nn.ReLU(), nn.Dropout(0.5), nn.Linear(256, classes)]
    return _Classifier(nn.Sequential(*layers))


# -- transposed, grouped and dilated convolutions --------------------------------------------------
class ConvAutoencoder(nn.Module):
    """Strided Conv2d encoder, ConvTranspose2d decoder back to the image (MSE on the input)."""

    def __init__(self, base: int = 32) -> None:
        super().__init__()
        self.enc = nn.Sequential(
            nn.Conv2d(3, base, 4, 2, 1),
            nn.ReLU(),
            nn.Conv2d(base, base * 2, 4, 2, 1),
            nn.BatchNorm2d(base * 2),
            nn.ReLU(),
            nn.Conv2d(base * 2, base * 4, 4, 2, 1),
            nn.ReLU(),
        )
        self.dec = nn.Sequential(
            nn.ConvTranspose2d(base * 4, base * 2, 4, 2, 1),
            nn.BatchNorm2d(base * 2),
            nn.ReLU(),
            nn.ConvTranspose2d(base * 2, base, 4, 2, 1),
            nn.ReLU(),
            nn.ConvTranspose2d(base, 3, 4, 2, 1),
            nn.Sigmoid(),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dec(self.enc(x))


def _reconstruct(out: Any, batch: Any) -> torch.Tensor:
    return F.mse_loss(out, batch)


def _autoencoder_images(bs: int) -> Any:
    return torch.rand(bs, 3, 64, 64)


class SignalAutoencoder(nn.Module):
    """Conv1d encoder, ConvTranspose1d decoder (kernel 2/stride 2 and kernel 4/stride 2)."""

    def __init__(self) -> None:
        super().__init__()
        self.enc = nn.Sequential(nn.Conv1d(8, 32, 5, 2, 2), nn.GELU(), nn.Conv1d(32, 64, 5, 2, 2), nn.GELU())
        self.dec = nn.Sequential(
            nn.ConvTranspose1d(64, 32, 4, 2, 1), nn.GELU(), nn.ConvTranspose1d(32, 8, 2, 2)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dec(self.enc(x))


def _signal_batch(bs: int) -> Any:
    return torch.randn(bs, 8, 1024)


class ResNeXtBlock(nn.Module):
    def __init__(self, cin: int, width: int, cout: int, stride: int, groups: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            _conv_bn(cin, width, k=1),
            _conv_bn(width, width, stride, groups=groups),
            nn.Conv2d(width, cout, 1, bias=False),
            nn.BatchNorm2d(cout),
        )
        self.down = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            if stride != 1 or cin != cout
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.body(x) + self.down(x))


def resnext_grouped(classes: int = 100) -> nn.Module:
    """Grouped 3x3 convolutions (groups=8, 16, 32), ResNeXt style."""
    layers: list[nn.Module] = [_conv_bn(3, 32)]
    cin = 32
    for width, cout, stride, groups in ((64, 64, 1, 8), (128, 128, 2, 16), (256, 256, 2, 32)):
        layers += [ResNeXtBlock(cin, width, cout, stride, groups), ResNeXtBlock(cout, width, cout, 1, groups)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    return _Classifier(nn.Sequential(*layers))


class DilatedSegmenter(nn.Module):
    """DeepLab-style: dilated 3x3 convolutions (rates 2, 4, 8) and an atrous pyramid, 2-d."""

    def __init__(self, base: int = 32, classes: int = 4) -> None:
        super().__init__()
        self.stem = nn.Sequential(_conv_bn(3, base, 2), _conv_bn(base, base * 2))
        self.body = nn.Sequential(
            *[
                nn.Sequential(
                    nn.Conv2d(base * 2, base * 2, 3, 1, r, dilation=r, bias=False),
                    nn.BatchNorm2d(base * 2),
                    nn.ReLU(),
                )
                for r in (2, 4, 8)
            ]
        )
        self.aspp = nn.ModuleList(nn.Conv2d(base * 2, base, 3, 1, r, dilation=r) for r in (1, 6, 12))
        self.head = nn.Conv2d(base * 3, classes, 1)

    def forward(self, x: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        size = x.shape[-2:]
        x = self.body(self.stem(x))
        x = self.head(torch.cat([F.relu(b(x)) for b in self.aspp], 1))
        return F.interpolate(x, size=size, mode="bilinear", align_corners=False)


def dilated_tcn(classes: int = 5) -> nn.Module:
    """WaveNet/TCN-style 1-d stack: dilations 1, 2, 4, 8, 16 and a grouped 1-d convolution."""
    layers: list[nn.Module] = [nn.Conv1d(8, 64, 1)]
    for d in (1, 2, 4, 8, 16):
        layers += [nn.Conv1d(64, 64, 3, padding=d, dilation=d), nn.BatchNorm1d(64), nn.ReLU()]
    layers += [nn.Conv1d(64, 64, 3, padding=1, groups=8), nn.ReLU()]
    layers += [nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(64, classes)]
    return _Classifier(nn.Sequential(*layers))


# -- sequences and tables ------------------------------------------------------------------------
class RNNClassifier(nn.Module):
    def __init__(
        self, kind: str, vocab: int = 5000, dim: int = 128, hidden: int = 256, bidirectional: bool = False
    ) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        rnn = nn.LSTM if kind == "lstm" else nn.GRU
        self.rnn = rnn(dim, hidden, num_layers=2, batch_first=True, dropout=0.1, bidirectional=bidirectional)
        self.fc = nn.Linear(hidden * (2 if bidirectional else 1), 5)

    def forward(self, x: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        out, _ = self.rnn(self.emb(x))
        return self.fc(out[:, -1])


def _tokens(vocab: int, seq: int, classes: int) -> Callable[[int], Any]:
    def make(bs: int) -> Any:
        return torch.randint(0, vocab, (bs, seq)), torch.randint(0, classes, (bs,))

    return make


def tabular_mlp(features: int = 64, classes: int = 3) -> nn.Module:
    return _Classifier(
        nn.Sequential(
            nn.Linear(features, 256),
            nn.BatchNorm1d(256),
            nn.ReLU(),
            nn.Dropout(0.1),
            nn.Linear(256, 256),
            nn.BatchNorm1d(256),
            nn.ReLU(),
            nn.Dropout(0.1),
            nn.Linear(256, classes),
        )
    )


def _table(bs: int) -> Any:
    return torch.randn(bs, 64), torch.randint(0, 3, (bs,))


def conv1d_net(classes: int = 5) -> nn.Module:
    return _Classifier(
        nn.Sequential(
            nn.Conv1d(8, 64, 7, padding=3),
            nn.BatchNorm1d(64),
            nn.GELU(),
            nn.Conv1d(64, 128, 5, padding=2, stride=2),
            nn.BatchNorm1d(128),
            nn.GELU(),
            nn.Conv1d(128, 128, 3, padding=1, stride=2),
            nn.GELU(),
            nn.AdaptiveAvgPool1d(1),
            nn.Flatten(),
            nn.Linear(128, classes),
        )
    )


def _signals(bs: int) -> Any:
    return torch.randn(bs, 8, 512), torch.randint(0, 5, (bs,))


# -- transformers (random init from configs) ------------------------------------------------------
def _hf(config_cls: str, model_cls: str, **cfg: Any) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        import transformers

        config = getattr(transformers, config_cls)(**cfg)
        return getattr(transformers, model_cls)(config)

    return build


def _lm_batch(vocab: int, seq: int) -> Callable[[int], Any]:
    def make(bs: int) -> Any:
        ids = torch.randint(0, vocab, (bs, seq))
        return {"input_ids": ids, "labels": ids.clone()}

    return make


def _cls_batch(vocab: int, seq: int, classes: int) -> Callable[[int], Any]:
    def make(bs: int) -> Any:
        return {"input_ids": torch.randint(0, vocab, (bs, seq)), "labels": torch.randint(0, classes, (bs,))}

    return make


def _seq2seq_batch(vocab: int, seq: int) -> Callable[[int], Any]:
    def make(bs: int) -> Any:
        return {
            "input_ids": torch.randint(0, vocab, (bs, seq)),
            "labels": torch.randint(0, vocab, (bs, seq // 2)),
        }

    return make


def _vit_batch(bs: int) -> Any:
    return {"pixel_values": torch.randn(bs, 3, 64, 64), "labels": torch.randint(0, 10, (bs,))}


_BERT = dict(
    vocab_size=8000,
    hidden_size=256,
    num_hidden_layers=4,
    num_attention_heads=4,
    intermediate_size=1024,
    max_position_embeddings=256,
    num_labels=4,
)
_GPT2 = dict(
    vocab_size=8000, n_embd=256, n_layer=4, n_head=4, n_positions=256, bos_token_id=0, eos_token_id=0
)
_GPT2_124M = dict(vocab_size=50257, n_embd=768, n_layer=12, n_head=12, n_positions=1024)

ZOO: tuple[ZooEntry, ...] = (
    ZooEntry("tabular_mlp", tabular_mlp, _table, _xent, (64, 512), quick=True),
    ZooEntry("resnet18", resnet18, _images(3, 32, 100), _xent, (8, 16)),
    ZooEntry("resnet50_narrow", resnet50_narrow, _images(3, 64, 100), _xent, (8,)),
    ZooEntry("mobilenet_v2", mobilenet_v2, _images(3, 64, 100), _xent, (8, 16), quick=True),
    ZooEntry("densenet", densenet, _images(3, 32, 100), _xent, (8,)),
    ZooEntry("unet", lambda: UNet(), _seg_batch, lambda out, b: F.cross_entropy(out, b[1]), (2, 4)),
    ZooEntry("vgg_small", vgg_small, _images(3, 32, 10), _xent, (16,)),
    ZooEntry("conv1d", conv1d_net, _signals, _xent, (16,)),
    ZooEntry("lstm", lambda: RNNClassifier("lstm"), _tokens(5000, 64, 5), _xent, (16, 32), quick=True),
    ZooEntry("gru", lambda: RNNClassifier("gru"), _tokens(5000, 64, 5), _xent, (16,)),
    ZooEntry(
        "bigru",
        lambda: RNNClassifier("gru", bidirectional=True),
        _tokens(5000, 64, 5),
        _xent,
        (16,),
        quick=True,
    ),
    ZooEntry("conv_autoencoder", ConvAutoencoder, _autoencoder_images, _reconstruct, (8, 16), quick=True),
    ZooEntry("convtranspose1d", SignalAutoencoder, _signal_batch, _reconstruct, (16,)),
    ZooEntry("resnext_grouped", resnext_grouped, _images(3, 32, 100), _xent, (8,), quick=True),
    ZooEntry(
        "dilated_seg", lambda: DilatedSegmenter(), _seg_batch, lambda out, b: F.cross_entropy(out, b[1]), (4,)
    ),
    ZooEntry("dilated_tcn", dilated_tcn, _signals, _xent, (16,)),
    ZooEntry(
        "bert_encoder",
        _hf("BertConfig", "BertForSequenceClassification", **_BERT),
        _cls_batch(8000, 128, 4),
        None,
        (4, 8),
        quick=True,
    ),
    ZooEntry(
        "distilbert",
        _hf(
            "DistilBertConfig",
            "DistilBertForSequenceClassification",
            vocab_size=8000,
            dim=256,
            n_layers=3,
            n_heads=4,
            hidden_dim=1024,
            num_labels=4,
        ),
        _cls_batch(8000, 128, 4),
        None,
        (8,),
    ),
    ZooEntry(
        "gpt2_decoder", _hf("GPT2Config", "GPT2LMHeadModel", **_GPT2), _lm_batch(8000, 128), None, (4, 8)
    ),
    ZooEntry(
        "llama_decoder",
        _hf(
            "LlamaConfig",
            "LlamaForCausalLM",
            vocab_size=8000,
            hidden_size=256,
            intermediate_size=688,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=256,
        ),
        _lm_batch(8000, 128),
        None,
        (4,),
    ),
    ZooEntry(
        "t5_enc_dec",
        _hf(
            "T5Config",
            "T5ForConditionalGeneration",
            vocab_size=8000,
            d_model=256,
            d_ff=1024,
            num_layers=3,
            num_decoder_layers=3,
            num_heads=4,
            d_kv=64,
            decoder_start_token_id=0,
            pad_token_id=0,
        ),
        _seq2seq_batch(8000, 64),
        None,
        (4,),
    ),
    ZooEntry(
        "vit",
        _hf(
            "ViTConfig",
            "ViTForImageClassification",
            image_size=64,
            patch_size=8,
            hidden_size=256,
            num_hidden_layers=4,
            num_attention_heads=4,
            intermediate_size=1024,
            num_labels=10,
        ),
        _vit_batch,
        None,
        (8,),
    ),
    ZooEntry(
        "gpt2_124m", _hf("GPT2Config", "GPT2LMHeadModel", **_GPT2_124M), _lm_batch(50257, 64), None, (2,)
    ),
)
