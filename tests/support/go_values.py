"""Go structs and JSON texts that more than one codec test checks: the gojson tests (each kind of
field, with and without ``omitempty``; a record of nested structs) and the fast path's, which
must encode and decode them exactly as the general path does."""

from __future__ import annotations

import dataclasses
from typing import Any

from dmsgw.gojson import (
    ANY,
    BOOL,
    BYTES,
    FLOAT32,
    FLOAT64,
    INT64,
    PLAIN,
    RAW,
    STRING,
    UINT64,
    GoStruct,
    MapOf,
    Ptr,
    SliceOf,
    StructOf,
    go_field,
)


@dataclasses.dataclass(frozen=True, slots=True)
class Inner(GoStruct):
    GO_NAME = "Inner"
    a: str = go_field("a", STRING, default="")
    b: str = go_field("b", STRING, omitempty=True, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class Everything(GoStruct):
    """One field of every kind, with and without ``omitempty``, in Go declaration order."""

    GO_NAME = "Everything"
    s: str = go_field("s", STRING, default="")
    s_o: str = go_field("s_o", STRING, omitempty=True, default="")
    flag: bool = go_field("flag", BOOL, default=False)
    flag_o: bool = go_field("flag_o", BOOL, omitempty=True, default=False)
    u: int = go_field("u", UINT64, default=0)
    u_o: int = go_field("u_o", UINT64, omitempty=True, default=0)
    i: int = go_field("i", INT64, default=0)
    i_o: int = go_field("i_o", INT64, omitempty=True, default=0)
    f: float = go_field("f", FLOAT64, default=0.0)
    f_o: float = go_field("f_o", FLOAT64, omitempty=True, default=0.0)
    f32: float = go_field("f32", FLOAT32, default=0.0)
    raw: bytes | None = go_field("raw", BYTES, default=None)
    raw_o: bytes | None = go_field("raw_o", BYTES, omitempty=True, default=None)
    list_: tuple[str, ...] | None = go_field("list", SliceOf(STRING), default=None)
    list_o: tuple[str, ...] | None = go_field(
        "list_o", SliceOf(STRING), omitempty=True, default=None
    )
    map_: dict[str, int] | None = go_field("map", MapOf(UINT64), default=None)
    map_o: dict[str, int] | None = go_field("map_o", MapOf(UINT64), omitempty=True, default=None)
    ptr: Inner | None = go_field("ptr", Ptr(StructOf(Inner)), default=None)
    ptr_o: Inner | None = go_field("ptr_o", Ptr(StructOf(Inner)), omitempty=True, default=None)
    inner: Inner = go_field("inner", StructOf(Inner), default_factory=Inner)
    inner_o: Inner = go_field("inner_o", StructOf(Inner), omitempty=True, default_factory=Inner)
    any_: Any = go_field("any", ANY, default=None)
    any_o: Any = go_field("any_o", ANY, omitempty=True, default=None)


EVERYTHING_ZERO = (
    '{"s":"","flag":false,"u":0,"i":0,"f":0,"f32":0,"raw":null,"list":null,"map":null,'
    '"ptr":null,"inner":{"a":""},"inner_o":{"a":""},"any":null}'
)


@dataclasses.dataclass(frozen=True, slots=True)
class Leaf(GoStruct):
    GO_NAME = "Leaf"
    name: str = go_field("name", STRING, default="")
    tag: str = go_field("tag", STRING, omitempty=True, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class Record(GoStruct):
    GO_NAME = "Record"
    text: str = go_field("text", STRING, default="")
    text_o: str = go_field("text_o", STRING, omitempty=True, default="")
    flag: bool = go_field("flag", BOOL, omitempty=True, default=False)
    nonce: int = go_field("nonce", UINT64, default=0)
    delta: int = go_field("delta", INT64, omitempty=True, default=0)
    ratio: float = go_field("ratio", FLOAT64, default=0.0)
    cores: float = go_field("cores", FLOAT32, omitempty=True, default=0.0)
    blob: bytes | None = go_field("blob", BYTES, default=None)
    blob_o: bytes | None = go_field("blob_o", BYTES, omitempty=True, default=None)
    names: tuple[str, ...] | None = go_field("names", SliceOf(STRING), default=None)
    counts: dict[str, int] | None = go_field("counts", MapOf(UINT64), omitempty=True, default=None)
    leaf: Leaf = go_field("leaf", StructOf(Leaf), default_factory=Leaf)
    parent: Leaf | None = go_field("parent", Ptr(StructOf(Leaf)), omitempty=True, default=None)
    leaves: tuple[Leaf, ...] | None = go_field("leaves", SliceOf(StructOf(Leaf)), default=None)
    extra: Any = go_field("extra", PLAIN, omitempty=True, default=None)
    literal: bytes | None = go_field("literal", RAW, omitempty=True, default=None)


# The peers and DIDs of the full ensemble the ensemble tests build.
PEER = "12D3KooWA4Xop1JaT3MHxwYMkCepYsv4iPVopMXwCz5iHYdBfeSB"


OTHER_PEER = "12D3KooWJMtMN1mTNRfgMqUygT7eSXamVzc9ihpSjeairm9PebmB"


DID = "did:key:z6MkehRgf7yJbgaGfYsdoAsKdBPE3dj2CYhowQdcjqSJgvVd"


HOST_DID = "did:key:z6MkhFwXNFWosLeugvSf4wcL9t3uuRXueGSFTRgSvHhWj5G2"


# json.Marshal of test_ensemble's FULL, written out by hand from ensemble.go's declarations.
FULL_JSON = (
    '{"v1":{"escalation_strategy":"teardown","allocations":{'
    '"db":{"executor":"docker","type":"service","resources":{"cpu":{"cores":1},'
    '"ram":{"size":1073741824},"disk":{"size":1073741824}},'
    '"execution":{"type":"docker","params":{"image":"postgres"}},'
    '"healthcheck":{"type":"","exec":null,"endpoint":"","response":{"type":"","value":""},'
    '"interval":0},'
    '"volume":[{"type":"local","mount_destination":"/var/lib/pg","read_only":false,'
    '"src":"/srv/pg"}]},'
    '"web":{"executor":"docker","type":"service","resources":{"cpu":{"clock_speed":2400000000,'
    '"cores":1.5},"gpus":[{"index":0,"vendor":"NVIDIA","pci_address":"","model":"T4",'
    '"vram":17179869184,"uuid":""}],"ram":{"size":2147483648},"disk":{"size":10737418240}},'
    '"execution":{"type":"docker","params":{"cmd":["nginx","-g","daemon off;"],'
    '"environment":["A=1"],"image":"nginx:1.25"}},"dns_name":"web",'
    '"keys":[{"type":"ssh","file":"ssh-ed25519 AAAA","dest":""},'
    '{"type":"gpg","file":"KEY","dest":"/root/k"}],"provision":["setup"],'
    '"healthcheck":{"type":"http","exec":null,"endpoint":"http://localhost/",'
    '"response":{"type":"string","value":"ok"},"interval":30000000000},'
    '"volume":[{"type":"glusterfs","mount_destination":"/data","read_only":true,"name":"vol",'
    '"servers":["gfs1"],"client_private_key":"K","client_pem":"P","client_ca":"C"}],'
    '"failure_recovery":"one_for_all","depends_on":["db"]}},'
    '"nodes":{"n1":{"allocations":["db","web"],"ports":[{"public":8443,"private":443,'
    '"allocation":"web"}],"location":{"accept":[{"continent":"Europe","country":"DE",'
    '"city":"Berlin","asn":3320,"isp":"DTAG"}],"reject":[{"continent":"Asia"}]},'
    f'"peer":"{PEER}","redundancy":2,"failure_recovery":"restart"}},'
    '"n2":{"allocations":[],"location":{}}},'
    '"edges":[{"s":"n1","t":"n2","rtt":20,"bw":1000000000}],'
    '"supervisor":{"strategy":"OneForOne","allocations":["db"],'
    '"children":[{"strategy":"RestForOne","allocations":["web"]}]},'
    '"keys":{"admin":"ssh-ed25519 AAAA"},"scripts":{"setup":"IyEvYmluL3NoCmVjaG8gPG9rPgo="},'
    '"subnet":{"join":true},'
    f'"exclude_peers":["{OTHER_PEER}"],'
    '"metadata":{"namespace":"default","pod-uid":"1234"},'
    f'"contracts":{{"c1":{{"did":"{DID}","host":"{HOST_DID}"}}}}}}}}'
)
