//! §6.3's data: the Penn Treebank sample that NLTK publishes (`corpora/treebank`, the combined
//! trees of `wsj_0001`–`wsj_0199`, about 5% of the Wall Street Journal part of the treebank),
//! fetched as NLTK's `treebank.zip`, taken from an existing `nltk_data` directory, or copied from a
//! local mirror, and verified file by file by SHA-256 before anything is written. The sample is
//! for non-commercial use only ([`PTB_SAMPLE_TERMS`]): this repository never carries it, and the
//! binary never embeds it.

use crate::data::download::{fetch_url_with, sha256_hex};
use crate::error::{Error, Result};
use crate::events::Events;
use crate::io::{io_err, write_atomically};
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Where NLTK publishes the sample (its data package `corpora/treebank`).
pub const PTB_SAMPLE_URL: &str =
    "https://raw.githubusercontent.com/nltk/nltk_data/gh-pages/packages/corpora/treebank.zip";

/// Environment variable naming a local mirror (a directory of `.mrg` files, or a `treebank.zip`)
/// to use instead of the network.
pub const PTB_MIRROR_ENV: &str = "TRANSFORMER_PTB_MIRROR";

/// Where `transformer data ptb-sample` puts the files, relative to the directory it runs in (the
/// repository root, where `configs/ptb-parse.toml` looks for them).
pub const PTB_SAMPLE_DIR: &str = "data/ptb-sample";

/// The sample's split by file (training, validation, test): the first two are those of
/// `configs/ptb-parse.toml`, all three the parsing quick start's.
pub const SAMPLE_SPLIT: [&str; 3] = ["wsj_0001..wsj_0159", "wsj_0160..wsj_0174", "wsj_0175..wsj_0189"];

/// The sample's terms, as its README states them (printed when it is fetched; the README itself is
/// kept next to the files).
pub const PTB_SAMPLE_TERMS: &str = "\
The Penn Treebank sample is a fragment (about 5%, files wsj_0001-wsj_0199) of the Penn Treebank,
Copyright (C) 1995 University of Pennsylvania, made available by NLTK under fair use for
illustrating language-processing tools. It is for non-commercial use only. Research using it
should acknowledge the Penn Treebank Project (Marcus, Santorini and Marcinkiewicz, 1993,
Computational Linguistics 19). Its README, kept next to the files, states the terms in full.
The full treebank is licensed by the LDC (LDC99T42).";

/// The largest member of an archive we read: a treebank file has a few hundred kilobytes at most,
/// so anything bigger is not the sample (and is not unpacked into memory).
const MAX_MEMBER_BYTES: u64 = 64 << 20;

/// How to tell a user to do without the network.
const MIRROR_HINT: &str = "--from DIR, --from-nltk-data DIR or $TRANSFORMER_PTB_MIRROR";

/// Every file of the sample that we have a checksum for, with its SHA-256 (generated from the
/// `SHA256SUMS` of a verified copy; `wsj_0190`–`wsj_0199` have none).
pub const PTB_SAMPLE_FILES: [(&str, &str); 189] = [
    ("wsj_0001.mrg", "01594cdf66a9aed93860cb61a4906d26073a35be72085760dc05b7e5bcaedee0"),
    ("wsj_0002.mrg", "6d6d049a47adb4e12175cacc1984c18813633b9e64b91badf0d56fc5b3f0ee20"),
    ("wsj_0003.mrg", "2c6061d7e11533f0ed91ce14128321c2952375a70faf00ffbcc7f7252e95ac92"),
    ("wsj_0004.mrg", "3635853bb2e6e0574a40e33340cb673e8063ae7adb6f885f42700f1f96173a11"),
    ("wsj_0005.mrg", "9c75ba61c734f5a29a54cc8005073705497346c2748ba635fea421c84f0faf81"),
    ("wsj_0006.mrg", "a8d57a2dc78d42b4194d517bafc1913006a506ee3517b14e3651547f99809bdb"),
    ("wsj_0007.mrg", "0f57e3d250e5926a0aec3ee8e1713c23fb8fb5d69ae0810b686e31fa32c96012"),
    ("wsj_0008.mrg", "17cb4fb7b90d745cc0b45db465b334e490ac27f62aeab40441551b05f03b1f70"),
    ("wsj_0009.mrg", "4ba9f5dc2a5f521da2796a6bbda35b09c0744994aad8c326311e5725b60e2fdc"),
    ("wsj_0010.mrg", "50ef5fbb6ab5d0eab34238f6f960e5d9efddc381f8baac58677cbf1dca034212"),
    ("wsj_0011.mrg", "ae0ad6160b6097a3d73dbf0cc5b1124097f80e41c91ff7d4f7da3a20586d9c1a"),
    ("wsj_0012.mrg", "e2e066a5fac515e21f0ecd645298b264aa90527ba405e05a8d9e6ca6ae67e481"),
    ("wsj_0013.mrg", "4d204ba100dbe3bff61d7017a7b4fc66c05966a08817698fce71173184145add"),
    ("wsj_0014.mrg", "3aaebbf6824e03aad1f2fbcefb0344b18fc98cd8e88b7baed99a210b2bc96161"),
    ("wsj_0015.mrg", "4a06fae9f1447f93a2bbebbbd4ed198e5cb8a49e9e63419377bc15b3032c43a5"),
    ("wsj_0016.mrg", "628d5e4d2a9a9794d3d3b0666e3bc6b6e0abfdf75b1352e7dba0cb33ecef5482"),
    ("wsj_0017.mrg", "a53b927b07c122f61e679c494bda8b64ca2ecb9305d150ee055c5b4f93ff134c"),
    ("wsj_0018.mrg", "f7f4e29e0ccd2c61420da386b84d318c67b221b760068b7ab3280d9d742d2d57"),
    ("wsj_0019.mrg", "f901ca9421807d27e96247d0aa4c7dff112c606294694986c4631e36cbe559ac"),
    ("wsj_0020.mrg", "a212004aa31949c0b8df74d613949f279ca47d9900b717f3e0c6ebe754714dc1"),
    ("wsj_0021.mrg", "6b1130f7768dad5c2bd6268a75f70bba70c38bf65741aa839784a63ffe6db40c"),
    ("wsj_0022.mrg", "71bae6bd4a75886b57c0bd1bc2b936c76355fd27e07973ee35efb94ca4a9e648"),
    ("wsj_0023.mrg", "e08dff23bb33d3df8fed390889101ea899595a982489e0cf86a71f364b669149"),
    ("wsj_0024.mrg", "5ac4d4dba19357cca78d5a5c472c80641d63d4eae58c3cae9e5cbd3cc2d0d386"),
    ("wsj_0025.mrg", "39ce65c9b692bf8d5e61a3623c266e2fe36fdc3b41ce4500a952f414872dcb6e"),
    ("wsj_0026.mrg", "8d98ae871abfac3e770cf8820d2a6034c5ef08b5052153d6f30190b80705f572"),
    ("wsj_0027.mrg", "c8997ff41d541088891fbdd77de07508dbbc7b787a08a59e2258076a7f6f065e"),
    ("wsj_0028.mrg", "06f3128b636bd165fbe00338a005872db830cc24ba6a7dbfc9a5ee64547ba43c"),
    ("wsj_0029.mrg", "0e5ac58701496a5f20a08084fa5bb06c0e7d1ac0badca704dd8ed5920c9ca258"),
    ("wsj_0030.mrg", "ab8b12b873b9ae30665ec724f8e2264e94a6a2ec429e4faadb3c57bb405c3841"),
    ("wsj_0031.mrg", "44f88fa454d701d6ccf673a1e94cd9206ec5d19e55a32a3e8662cf156f03f3fb"),
    ("wsj_0032.mrg", "3834990b59b8ff329ac02df01c8466d08b0770d1ea2074228e261a71c3fc9d55"),
    ("wsj_0033.mrg", "c63fcd0245b49b942113307e9dcc41c7b540bf1a9faf2f33524d626b198d4b1c"),
    ("wsj_0034.mrg", "4df990b53a92dcaf7c38995ca3850664e47cc097205405dbd8c36756812df8ee"),
    ("wsj_0035.mrg", "f5db5470d7fc3d35d8242c0e2815f98511071306404811b9fb0384b0c5b7dae4"),
    ("wsj_0036.mrg", "121b7b27a5658e74e908c5b8f7c505057d65b2e745448c8faded5596af099917"),
    ("wsj_0037.mrg", "4dc6c1ab694ddc2e52f89394daaff2eb479e74085ba1b1e6fecbbc9f63a88975"),
    ("wsj_0038.mrg", "ac8a549df82b583b5c3e852b2cac468b25364f23fcf348975f3169b1df3d91c5"),
    ("wsj_0039.mrg", "619292cb6268d36e65a884803a0c87473d7de21cf03492671517dc08912b0d81"),
    ("wsj_0040.mrg", "1f29a101f2c0ca7734b49d0b15e7a454d7e0ddd27795103b29e78466511d117f"),
    ("wsj_0041.mrg", "4e5fedce1a21d7a8902a274e46f83eae320edcda47ad5f1e88cede0eee33bca8"),
    ("wsj_0042.mrg", "20358db942a0e6792bb646f4ac581d32747fa727ad17d5609e50b41205f57c07"),
    ("wsj_0043.mrg", "3170b425445080f8cf94e8464f708a47a15c57c81c95b082bf8993ceadf84e24"),
    ("wsj_0044.mrg", "d66b41fd1c49f365c12e49db770d871b2fa6509bf900ccaec94cc368d08e08a6"),
    ("wsj_0045.mrg", "e652d4c96ea9ec97f64d1dced13c911a7b0c90781bee6adeca5643a70a5f3fb3"),
    ("wsj_0046.mrg", "d08e5fe2c5281e9785bf8450a3bd7da697e94b6141af6504b219c6fef2f7e4a5"),
    ("wsj_0047.mrg", "f92d7175898eb5e8a5c1db99ecaf608b02762b82237a1314642ba777d194b948"),
    ("wsj_0048.mrg", "7ce1fdb84c5eb093e12662c00afcd5ce450e1baba7db79a5c15014b16278e1d0"),
    ("wsj_0049.mrg", "bfba3c35eb1beee6416a7e9ade69ebfc4fdb06ae9ddc9690075c79149c4290c7"),
    ("wsj_0050.mrg", "0499b2a23a588b6ec11f443b5c5b8b40224330fc69eec9f2720998ee369f5dc2"),
    ("wsj_0051.mrg", "25b3f14f6b411d888b5219192cf541476382c016cfc702b4050175528b2c6477"),
    ("wsj_0052.mrg", "d446f2e73f80db604ec49ef1c5e98f18ce504856812c0967cfc3c14dd69a5edf"),
    ("wsj_0053.mrg", "84b58f9a3fc8a788c0c5e7681e334e8cbec39dd544b7ea8d765b5cd49d3e8694"),
    ("wsj_0054.mrg", "cfa0a6212c8ebf687db90690467c09aa7ad9e03cec899e66eaaf9a8efb117b4e"),
    ("wsj_0055.mrg", "510f91075841f4d2bab39e988c91681c2ff9628d6b5cf37008ccf53ebb083ecf"),
    ("wsj_0056.mrg", "54e391b4b0325bc91df27e053de041f4a747b74c5acfaf956886412607a63d41"),
    ("wsj_0057.mrg", "041cc458dc5b24465809c060474b31b38b2bdbf3a7f66997a5474b3fc58d3e5b"),
    ("wsj_0058.mrg", "31b6916593573d7004900b0315b254f4c95f1d73b7aa8cfecf983b53aeeac70a"),
    ("wsj_0059.mrg", "81a2b4506bab58059d4be527fb4b7a321b467078ea12de7f74f7b153a851b6b3"),
    ("wsj_0060.mrg", "17ca0b343ae13672601b2ef173d74fbf4ab633fe16ce531ee5e56d84d8b165a5"),
    ("wsj_0061.mrg", "86bdf936db46b4c1be8b12cac6f06920299bc6c31c5ae8ff3f10202672c3ca91"),
    ("wsj_0062.mrg", "7836602a8739160a0717cda3a0bb18b99ddc992a2c68b40c38219819ed832723"),
    ("wsj_0063.mrg", "533a1989c18b18edb5cd8636ddced69d040ea87d228e243b75d4f2e10edb9406"),
    ("wsj_0064.mrg", "3bb894e007cb306635fc8477a58d2f171a12a4ef0c013ca7e903e7907b6397e4"),
    ("wsj_0065.mrg", "d604527df887a93491220dbb5b6eca14c46d684e47d7ee78b70a298d09ce1682"),
    ("wsj_0066.mrg", "daa941898d542418d13b722635197ca2de2b87150eaa66a1fff1ff99200f32d2"),
    ("wsj_0067.mrg", "b7de2fe308eb318dda4b6c34e2d736ea4620b3a41715ecc798436395651a52ad"),
    ("wsj_0068.mrg", "26dacfbe21beedb83a5695f5536b20ca74707c05c75fa4060b0876597decef5f"),
    ("wsj_0069.mrg", "deb2e1298a2415a0b7c2ba6397644f83b81e2c21b036121b9fdff9e9c919370e"),
    ("wsj_0070.mrg", "a97c0dcc7c26f33c702f5d931f70bf3d5ccd6ae32efec592dfdd7e3cf013037e"),
    ("wsj_0071.mrg", "dfe885334c3b72b573ecfe5591ae77ed33a78b076f67edd91c7d9a0a7267488a"),
    ("wsj_0072.mrg", "a5c95610cc63d90151beabf6fe2135a2a525d155c45c072dcbbfe41118b62e20"),
    ("wsj_0073.mrg", "98d9bac6607e4c65f101187b1ffbdf609c7a67cb0898402af513760891b3b73c"),
    ("wsj_0074.mrg", "180e1dc765c4a7774345088c2afd0c952165643853461d7d5bce9e00f0252da5"),
    ("wsj_0075.mrg", "d58cd4c773cd91560ee41fd0cb4de98537a2de09b31c32776257223ab6b48cb1"),
    ("wsj_0076.mrg", "54e8b04471990abba0d7d7fc52c80948e572069cdd712b2ee9aad99661afca76"),
    ("wsj_0077.mrg", "1fcd4cacbe70a91c9490132719903716712289207d63e38e7742357c25d768a9"),
    ("wsj_0078.mrg", "ae31654c8f6dccd4aeead8dc27fc805829d479dabdfcb00eaf3a979362090053"),
    ("wsj_0079.mrg", "557726f2c4719ea9fe8a466c6509558db42bb506cdda8451d7ef37e08088db96"),
    ("wsj_0080.mrg", "2e584059245060f053e44ca574ba340f1f87d4b44e0d361c9fc9b279bd53fabb"),
    ("wsj_0081.mrg", "abd353940f9ddf40765faaeb48340c84307d2926dc06e6eaaffef913f7305dac"),
    ("wsj_0082.mrg", "7c9ca9fab09d6c5adc10aa9a24d30616bfe878590f370787727736950bd2e086"),
    ("wsj_0083.mrg", "8a29d2c716d85a05364523c592c0ca0a4c6321fb8e6af8ee73a637ed948b494f"),
    ("wsj_0084.mrg", "4cd2567a17e3c8d00e3e545d200f0c4125cd57c01938426c1ca6095b60ba6ce2"),
    ("wsj_0085.mrg", "ad0df887236a984d4123f18796f8b2d7feb227f49ff06f750edcb0e793657109"),
    ("wsj_0086.mrg", "e6f89477453b0fc9f1cea00b89cf4f46bdeeac7a4b3a59aa14795b9bd36e676b"),
    ("wsj_0087.mrg", "007885a25a49b2afae31ad29beea62fdb4951e1ea2a1bbb82fbea229cb197052"),
    ("wsj_0088.mrg", "4294fedf468e9da0eefcc29a920cf0b021dbd0586bf96d622cfab13734b12eff"),
    ("wsj_0089.mrg", "c5e86637eb6393ed916ebce5bab3abd26696d32ecb2d673e13204d05b6b0a1d6"),
    ("wsj_0090.mrg", "a9bbb46524be4e0a94bb092afc02c1a0949de9cde9538d2355eec0a6b7b0c9d4"),
    ("wsj_0091.mrg", "d529ca6604ed04208a87bb75c7f813620d94fd71b6d410bb6d8be9e2584bc420"),
    ("wsj_0092.mrg", "ed251f6bbdd1502018d57e794ffa769c8c2edcab9e07c5fb5ce6c2c404d8ab19"),
    ("wsj_0093.mrg", "a3f330bfacfb59ff17174cd539e07f64bceb150ca23a74a463390c2dd9be0113"),
    ("wsj_0094.mrg", "aa7d0f6d6ea1d12b0eb306b7179d9af8cf76680fcf7bd92be28aaaebd6e748db"),
    ("wsj_0095.mrg", "4f4059f97d800b495bea141ddfc1e5b82e0ba988a1d172948f227af14ff1d112"),
    ("wsj_0096.mrg", "1915bec22bb92ab459d7d4a7ad8c8a87a8dd5d4c0db881f3715b4aad2d65578b"),
    ("wsj_0097.mrg", "72c4b6a70a644d846b51eac4eaa5692604a7e2a5a1029be454a68835408baf72"),
    ("wsj_0098.mrg", "927f0b44c58e1ded59c601e655dccdf754ddc5174194f6cae84402d0f92e8d04"),
    ("wsj_0099.mrg", "6630cfc1129731898f7d71b3755a04a221d39e6c037b846e9b8422e9bf4bfbce"),
    ("wsj_0100.mrg", "ef0a8b1b1206c22aaf41bd6403e4dca45ea06323646438e1c407683ba3887072"),
    ("wsj_0101.mrg", "40673de14862a0f89ad7a40c97f55736ceab3fd5b21b03a8e72ad0029d858bcd"),
    ("wsj_0102.mrg", "4a25fdc17084a3e1b8ab55ebc16b1430f35c640e8ad4ead966aa445192f2829e"),
    ("wsj_0103.mrg", "b4382cb8ccfd9f4869b5c5fd37ce5354a0eb2f8ce3bd405a2184d8982ad3cdf7"),
    ("wsj_0104.mrg", "3aed1e4f0a942aefb8601c3ee0357a2f223709a05c85b7504d9fff43c6cc426a"),
    ("wsj_0105.mrg", "c1d2ba50d586a83df4b33eaad4908bf1a813e32330420d93957336e8cceb8fc7"),
    ("wsj_0106.mrg", "21695699674a41a762401ff7a18186d9a7601997a65b0283fc9af7c8849b000e"),
    ("wsj_0107.mrg", "6af562c0bca7760685ddabaa3585fe14343c55b7d8de35afc0f6c6bf95ee4bc1"),
    ("wsj_0108.mrg", "6dbb42a93bdf116e6a41e72adc9a5fc2610917a18f6d077580b5a5a69f88603a"),
    ("wsj_0109.mrg", "8875f334f0f5b663abacc313a63194841f0533dca41262407e6654306700a656"),
    ("wsj_0110.mrg", "a9b5a07a62c5daefacee36ea9b12a776b255a5f93f766b730d7a0bc1420e5817"),
    ("wsj_0111.mrg", "d3b37ddc07378bb87d0a9f58f600c971ffeb16c75e85a77ec342d57b21e89527"),
    ("wsj_0112.mrg", "150931755856b27a44018487ab1379f08b854af5357672f362e6b35e0d4b3984"),
    ("wsj_0113.mrg", "ef5c52a08c11e3e6c2847e4f400d35b85dc099fd4af84e7bac350f2ea9fafcd6"),
    ("wsj_0114.mrg", "58a449def23fb644418ef42d3a8f56a7fabbbc19c18322ef02aa871d4c5ba8e0"),
    ("wsj_0115.mrg", "0e7ed4701e28a55b259eca90f6a1c104c97333a6f8ca54a04e86eccf4a2109bd"),
    ("wsj_0116.mrg", "1df2c6d8bfa201d9165525b92e26467dae3adcf9200ce48c1c974bf8ebd37856"),
    ("wsj_0117.mrg", "800a13a66a5724682ad93ec71383ed0609fb9bc2eacfee57d421215f7c46f610"),
    ("wsj_0118.mrg", "bfc343bd9b71429b05423cbdfe0f70a42f6e35788072e85ea7b7c4a7d623bad0"),
    ("wsj_0119.mrg", "cf9c37f86d86463939094fe1658c3ba4e252b04dbf2d4f167af9c19c5c78cede"),
    ("wsj_0120.mrg", "5c6dc534f11a549d7fa34d04099114840456f2f457c7a35bdf09964f08341b48"),
    ("wsj_0121.mrg", "8858d23ad6f30c14aaad5aa6f05fa017a31fc4e238615457c9f128968c5585c8"),
    ("wsj_0122.mrg", "54288c01032e02996c20f209b844c1cb8b23a1eb3eba9e3a4ac732b2e429fd24"),
    ("wsj_0123.mrg", "26ac8b99dc2df758838583f4840b4d8280d0996170d0ffcf28aa98cf6f9e432a"),
    ("wsj_0124.mrg", "95e00feafde2a6e9b91446e9a4f272daf31b0c84b2eae35e09102f547193c54f"),
    ("wsj_0125.mrg", "038b4a0bb26f5458d3ef4c9676848ba6642d20c2768ee53bef1d826300106d65"),
    ("wsj_0126.mrg", "2e7987064b599fa7064232776b7e8318ee809f561b8af579ea78ae17af28e7d2"),
    ("wsj_0127.mrg", "e44b68b3ef145402f577bbdd2c843c854c9c03539cb1c842a80879eec66e49bc"),
    ("wsj_0128.mrg", "3236811715d0e45901553ab80234f04c385b1a41faed673dbe679114ea146553"),
    ("wsj_0129.mrg", "dcd27d7c02efd221e2adcac52a503f979597fe127b25cff41d2a54677feb4e60"),
    ("wsj_0130.mrg", "54e227ccb9afe5c0f17906e865c809d93f62d10df38712e77504a28e4ae735ae"),
    ("wsj_0131.mrg", "cf31a6c9f5eaaa6bc0419dcb73d1ea1294a5afe7c27b3b77df8d62e48b442b78"),
    ("wsj_0132.mrg", "29fb96a10e269c8d73a9d45a40e637ed5183f8e7a776056e78ff64d66caf6d38"),
    ("wsj_0133.mrg", "537605067375aad8958e773d9125ff72c804a722a091afbfc004c696eb75dfe1"),
    ("wsj_0134.mrg", "5002c17de03c896eb6859b2e8df7d43c58525e775797af9c7a21368c4ff13a0f"),
    ("wsj_0135.mrg", "6f50fac2178c9e0949817dd0b9e65113065161e53489dca9d03a2a12ce1c815b"),
    ("wsj_0136.mrg", "e4e64de81097125b9d6971fb5835b8c4fe78dde24cdc7c7ccdcfe10245ab045d"),
    ("wsj_0137.mrg", "e8a2f1ecd68cf7ecf9c5e55ca9e7c7873f35d04dd63b2288699326fdd7f02bd5"),
    ("wsj_0138.mrg", "752bc0e080aae15f41277fa1d324f5d6626654d9bdb38cb6d6456e94da04e588"),
    ("wsj_0139.mrg", "cc552830363248e2dce6022204b5aa86bf40eb7738b491f380ea1f7305da1e2b"),
    ("wsj_0140.mrg", "b3ba25043e201a0bb67a2b34877230f4f7bd68c44fe0c91d941bef0d001ed8a4"),
    ("wsj_0141.mrg", "89b5d9b0a40c749979371369e4f61d489446dc16ae87efd5c9caf63e0f583051"),
    ("wsj_0142.mrg", "76e00411245c12d3360ff6022333ad003c7bd8d5f8941640e8b0ba77570dc078"),
    ("wsj_0143.mrg", "8081453b46c5b2fd0ea131d4dcd1f641dca9ec50bb72933b4361a3fa4a090388"),
    ("wsj_0144.mrg", "f3e15ec4b20996def68990cd1e13acd37917dcc3938bfc702e49f8641b01c611"),
    ("wsj_0145.mrg", "61004e92d60a6dc79002bb4000e59c106344a340dc9468a41e7b1666285fa1e9"),
    ("wsj_0146.mrg", "f027ce89205b2f3865ba31c954662b801f2792d11c590222f8307383265777f6"),
    ("wsj_0147.mrg", "993413806e5c63fcfd32803b8bd1d2b73688ba92504d92fa747276d082f9c2d8"),
    ("wsj_0148.mrg", "1e07e1dd8e44b59993c14aa7ea46120c61023dc06db9e5de2d028b321b253dc2"),
    ("wsj_0149.mrg", "43190f493944116a5fe33e9d609fefded8ae0484103a09672078e0e3e97a19ef"),
    ("wsj_0150.mrg", "28cbc8646a2442b95d7f51507fb0b06359d95c1f502cd9b62e8d40acd858a729"),
    ("wsj_0151.mrg", "96522d098173a3ad9728964e2c4d120b6f6d86a2303fae233063054638686f6e"),
    ("wsj_0152.mrg", "9c1e2c5f1cc6864e3fc6c2aeeb2d1943a960c26ae3038a1a07d4b42675bc042c"),
    ("wsj_0153.mrg", "00e66e67f4032ac898d6905444c7724bae023005eec1bf452392fe9311e5d160"),
    ("wsj_0154.mrg", "369c01c2da482481b22778dd4a57bb63ea915ed7b0913f6499a722728ab56ab4"),
    ("wsj_0155.mrg", "2d3b67f05fd8fc8e7fc98864f9a6cc2cb041bc9667644004e429732f9ec34d1a"),
    ("wsj_0156.mrg", "aa7894393ed0b985af30fee083db013bb0f2527696b59fcaef7808c2f68f0763"),
    ("wsj_0157.mrg", "2655fb2d5af45bcda0a64d958150b55d06794592779b5408d717430f609b1a55"),
    ("wsj_0158.mrg", "fa834d0c467f6421d65e49602a3695e06f955dc9a3402edb19f4fb3e02d610c3"),
    ("wsj_0159.mrg", "1caf8425f54a17f9d3b0be46f78fda3f684119d76712499e0cd21edb7d1691ab"),
    ("wsj_0160.mrg", "8d23e8b3e47e7149850544ae205282940cc586ea57d647191ddb5c00fa071f68"),
    ("wsj_0161.mrg", "a822338e67fca419e68c2f2be8fc852074b7e326c32b363b1a85f302b7c6c543"),
    ("wsj_0162.mrg", "f26fbd950c535dd2ac8c235cb6d34bf418cd2e6383df6663e06dfb57ff14bddc"),
    ("wsj_0163.mrg", "5e7cfa7558b3a3f26b1c533adbdf1cebfbf3359aa736cf96625fd04528f6655f"),
    ("wsj_0164.mrg", "46507a6c8e537e1a7681051bc79c5cd7b59ba2082b2371fffa500131cf30a75c"),
    ("wsj_0165.mrg", "be60edb7d80afee4a6d9f2913c9e0b41407d751eb297fc20c3f6b8d52a3ba77e"),
    ("wsj_0166.mrg", "e3008a6d229e96ce7dccd859e974f76627e3bfed47bbd93a4bff4f29051aebb3"),
    ("wsj_0167.mrg", "6556a7779c07c258b6f1164da4f0c1b2d33097e6af18454b47af34af42164e9e"),
    ("wsj_0168.mrg", "1b07b8d15792bd85d2719d0940f8a568110d9ddac4d39d06d2bb1dec3887fe2f"),
    ("wsj_0169.mrg", "5bf13e23855f0997fb6eea63a94fc48f0bf8719acbba86b0ba8a1eb539953658"),
    ("wsj_0170.mrg", "cb06c5745162c6dfd26b429e97e12cef7240f629a17750ff148c4d3985e00afe"),
    ("wsj_0171.mrg", "35c3846b959d52630e7519589df2372afa3a401a7e1d729923320eb69ebd5f7b"),
    ("wsj_0172.mrg", "2c6dd758024d2c148bda449f95e05d9c6633eed16fb25f31244ae78d6f6833dd"),
    ("wsj_0173.mrg", "4f4bb75d576fbfa8548b82313d1765e7f9dfd5c0d30fd5e8a147b35d387944c0"),
    ("wsj_0174.mrg", "38a9e52e7286fa2374b4e503d6a2b3471941706452ecaaba402deb0f1f548d4f"),
    ("wsj_0175.mrg", "aba941616bf872a99ecd7ff9f4f87e3ad2839759c64effc443f6d26cd642f469"),
    ("wsj_0176.mrg", "7b1a75af613dd64d7c0270ae1b1b6651e5fbb20710915671673e8087d49328e2"),
    ("wsj_0177.mrg", "b46a89160bda02a4f5ccf74c1eb34ef29d45c73bcb3166bc48c41e7cc8b72641"),
    ("wsj_0178.mrg", "00cad4ff49fba79d5c65febdbf4489602f136cfc74cf25e1df25628eeeb8b82a"),
    ("wsj_0179.mrg", "49fd5ba48c4dcd0a630592dd63152f2334ea67adbb365ab192b488e39c652e33"),
    ("wsj_0180.mrg", "1d747ec8dbfaa2e927c3b29215d378f0551530e11c8c9a15d7476021fd524134"),
    ("wsj_0181.mrg", "dfb617e618fa470a65408238cae1b591a56d433896277a69a0253b2d560df400"),
    ("wsj_0182.mrg", "c8de015dd7f4a5d98d866522cd33086c339019e842e2281fabbe083fe0fc30ad"),
    ("wsj_0183.mrg", "0eb82d46c899cb5465aceb71a2265e76e135169c981c4463b711eb502f897080"),
    ("wsj_0184.mrg", "8f47379057ca56fb3c80ddf659f9aa98a125caf81fc8f020e24dac305f0674e2"),
    ("wsj_0185.mrg", "58b339ef944432b567049e284ed6c159914098f5fc1765bf20dcc18dd4286db5"),
    ("wsj_0186.mrg", "a2db6d6da60579e0e243a4137d80b5ec3091dfd02e757ff920d4c247077101ef"),
    ("wsj_0187.mrg", "d0418b8bf68ab58a5c75ea61a25d00b50073bc12fd1a998ca68742f98043384c"),
    ("wsj_0188.mrg", "2bcf6e2555c67d108b1dc5ff889cdea2469646a90f05d5a51298a3c42f9d35bb"),
    ("wsj_0189.mrg", "034cbded7db35b7d2476df7f22c7c40108fbca6b88d91577d75c2b3888dc9d9b"),
];

/// Where the sample comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TreebankSource {
    /// NLTK's `treebank.zip` at this URL.
    Url(String),
    /// A `treebank.zip` on disk (such as `nltk_data/corpora/treebank.zip`).
    Zip(PathBuf),
    /// A directory holding the `.mrg` files (a mirror, a copy made by `data ptb-sample`, or
    /// `nltk_data/corpora/treebank/combined`).
    Dir(PathBuf),
}

impl TreebankSource {
    /// A local mirror: a `treebank.zip` file, or a directory of `.mrg` files.
    pub fn local(path: &Path) -> TreebankSource {
        if path.is_file() {
            TreebankSource::Zip(path.to_path_buf())
        } else {
            TreebankSource::Dir(path.to_path_buf())
        }
    }

    /// The treebank of an `nltk_data` directory: `corpora/treebank/combined` when NLTK unpacked it,
    /// else `corpora/treebank.zip`; `None` when it has neither.
    pub fn in_nltk_data(dir: &Path) -> Option<TreebankSource> {
        let combined = dir.join("corpora/treebank/combined");
        let zip = dir.join("corpora/treebank.zip");
        if combined.join(PTB_SAMPLE_FILES[0].0).is_file() {
            Some(TreebankSource::Dir(combined))
        } else if zip.is_file() {
            Some(TreebankSource::Zip(zip))
        } else {
            None
        }
    }

    /// [`in_nltk_data`](Self::in_nltk_data), or an error that says what to do.
    pub fn from_nltk_data(dir: &Path) -> Result<TreebankSource> {
        Self::in_nltk_data(dir).ok_or_else(|| {
            Error::Input(format!(
                "{}: no corpora/treebank/combined/*.mrg and no corpora/treebank.zip in this nltk_data directory; \
                 install it there with `python -m nltk.downloader -d {} treebank`, or leave out --from-nltk-data \
                 to download it",
                dir.display(),
                dir.display()
            ))
        })
    }

    /// The URL or path, for messages.
    pub fn describe(&self) -> String {
        match self {
            TreebankSource::Url(u) => u.clone(),
            TreebankSource::Zip(p) | TreebankSource::Dir(p) => p.display().to_string(),
        }
    }
}

/// NLTK's search path for its data, in NLTK's order (`nltk.data.path` on Unix, less the entries
/// under Python's prefix): every directory of `$NLTK_DATA` (`nltk_data_env`, separated as `PATH`
/// is), `~/nltk_data`, `/usr/share/nltk_data`, `/usr/local/share/nltk_data`, `/usr/lib/nltk_data`,
/// `/usr/local/lib/nltk_data`.
pub fn nltk_data_dirs(nltk_data_env: Option<&OsStr>, home: Option<&Path>) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = nltk_data_env.map(|v| std::env::split_paths(v).collect()).unwrap_or_default();
    dirs.retain(|d| !d.as_os_str().is_empty());
    dirs.extend(home.map(|h| h.join("nltk_data")));
    for d in ["/usr/share/nltk_data", "/usr/local/share/nltk_data", "/usr/lib/nltk_data", "/usr/local/lib/nltk_data"] {
        dirs.push(PathBuf::from(d));
    }
    dirs
}

/// The first directory of `dirs` whose treebank [`TreebankSource::in_nltk_data`] finds.
pub fn find_nltk_treebank(dirs: &[PathBuf]) -> Option<(PathBuf, TreebankSource)> {
    dirs.iter().find_map(|d| TreebankSource::in_nltk_data(d).map(|s| (d.clone(), s)))
}

/// What [`fetch_ptb_sample`] left in its directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PtbSample {
    /// The directory.
    pub dir: PathBuf,
    /// Files whose SHA-256 matched [`PTB_SAMPLE_FILES`] (all of them).
    pub verified: usize,
    /// `.mrg` files kept that have no recorded checksum (NLTK's archive has `wsj_0190`–`wsj_0199`),
    /// by name.
    pub unverified: Vec<String>,
    /// Whether the verified copy already there was kept and nothing was fetched.
    pub cached: bool,
}

/// The files of a source: `.mrg` members by file name, and the README.
struct Fetched {
    mrg: BTreeMap<String, Vec<u8>>,
    readme: Option<Vec<u8>>,
}

/// Whether `name` is a plain `.mrg` file name (no directory part, not hidden).
fn tree_file_name(name: &str) -> bool {
    name.len() > 4
        && name.ends_with(".mrg")
        && !name.starts_with('.')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
}

/// Reads `bytes` as NLTK's `treebank.zip`: the members `*/combined/*.mrg` and `treebank/README`.
fn read_zip(bytes: &[u8], origin: &str) -> Result<Fetched> {
    let archive_err = |reason: String| Error::Archive { archive: origin.to_string(), reason };
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(bytes))
        .map_err(|e| archive_err(format!("not a readable zip archive ({e}); fetch it again or use another source")))?;
    let mut out = Fetched { mrg: BTreeMap::new(), readme: None };
    for i in 0..zip.len() {
        let mut member = zip.by_index(i).map_err(|e| archive_err(format!("member {i}: {e}; fetch it again")))?;
        let Some(path) = member.enclosed_name() else { continue };
        let parts: Vec<String> = path.iter().map(|c| c.to_string_lossy().into_owned()).collect();
        let name = parts.last().cloned().unwrap_or_default();
        let is_tree = parts.len() >= 2 && parts[parts.len() - 2] == "combined" && tree_file_name(&name);
        let is_readme = parts.len() == 2 && name == "README";
        if member.is_dir() || !(is_tree || is_readme) {
            continue;
        }
        let shown = path.display().to_string();
        if member.size() > MAX_MEMBER_BYTES {
            return Err(archive_err(format!("{shown} has {} bytes: this is not the treebank sample", member.size())));
        }
        let mut data = Vec::with_capacity(member.size() as usize);
        member.by_ref().take(MAX_MEMBER_BYTES + 1).read_to_end(&mut data).map_err(|e| {
            archive_err(format!("{shown} cannot be unpacked ({e}): the archive is corrupt; fetch it again"))
        })?;
        if is_readme {
            out.readme = Some(data);
        } else if out.mrg.insert(name.clone(), data).is_some() {
            return Err(archive_err(format!("holds {name} twice: it is not NLTK's treebank.zip")));
        }
    }
    Ok(out)
}

/// Reads the `.mrg` files of a directory (not its subdirectories) and its `README` (or
/// `README.orig`, as a mirror may name it).
fn read_dir(dir: &Path) -> Result<Fetched> {
    let mut out = Fetched { mrg: BTreeMap::new(), readme: None };
    for e in std::fs::read_dir(dir).map_err(io_err(dir))? {
        let path = e.map_err(io_err(dir))?.path();
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if tree_file_name(&name) && path.is_file() {
            out.mrg.insert(name, std::fs::read(&path).map_err(io_err(&path))?);
        }
    }
    for name in ["README", "README.orig"] {
        let p = dir.join(name);
        if p.is_file() && out.readme.is_none() {
            out.readme = Some(std::fs::read(&p).map_err(io_err(&p))?);
        }
    }
    Ok(out)
}

fn gather(source: &TreebankSource, progress: &mut dyn FnMut(u64, Option<u64>)) -> Result<Fetched> {
    match source {
        TreebankSource::Url(url) => read_zip(&fetch_url_with(url, MIRROR_HINT, progress)?, url),
        TreebankSource::Zip(path) => read_zip(&std::fs::read(path).map_err(io_err(path))?, &path.display().to_string()),
        TreebankSource::Dir(dir) => read_dir(dir),
    }
}

/// The names of `names` for a message: all of them when few, else the first, the last and the count.
fn name_list(names: &[String]) -> String {
    match names {
        [] => String::new(),
        [a] => a.clone(),
        _ if names.len() <= 4 => names.join(", "),
        [first, .., last] => format!("{first} … {last} ({} files)", names.len()),
    }
}

/// The `.mrg` files of `dir` that [`PTB_SAMPLE_FILES`] does not list.
fn unlisted(dir: &Path) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).map_err(io_err(dir))? {
        let name = e.map_err(io_err(dir))?.file_name().to_string_lossy().into_owned();
        if tree_file_name(&name) && !PTB_SAMPLE_FILES.iter().any(|(n, _)| *n == name) {
            out.push(name);
        }
    }
    out.sort();
    Ok(out)
}

/// Whether `dir` already holds every file of [`PTB_SAMPLE_FILES`] with its checksum.
fn verified_copy(dir: &Path) -> bool {
    PTB_SAMPLE_FILES.iter().all(|(name, sha)| std::fs::read(dir.join(name)).is_ok_and(|b| sha256_hex(&b) == *sha))
}

/// Makes the sample present and verified in `dir`: kept as it is when every file there already
/// matches its checksum (`cached`), else read whole from `source`, every file of
/// [`PTB_SAMPLE_FILES`] checked against its SHA-256, and only then written, each file atomically,
/// with the README (its terms) beside them. A file that is missing from the source or whose
/// checksum differs is an error naming it, and then nothing is written. `.mrg` files the table does
/// not list are written too and returned as unverified. `events` hears what happens and
/// the bytes of a download (done, total if known).
pub fn fetch_ptb_sample(source: &TreebankSource, dir: &Path, events: &mut dyn Events) -> Result<PtbSample> {
    if dir.is_dir() && verified_copy(dir) {
        let unverified = unlisted(dir)?;
        events.log(&format!("{}: {} files cached, checksums ok", dir.display(), PTB_SAMPLE_FILES.len()));
        return Ok(PtbSample { dir: dir.to_path_buf(), verified: PTB_SAMPLE_FILES.len(), unverified, cached: true });
    }
    let origin = source.describe();
    events.log(&format!("reading {origin}"));
    let fetched = gather(source, &mut |done, total| events.download(done, total))?;
    let missing: Vec<String> =
        PTB_SAMPLE_FILES.iter().filter(|(n, _)| !fetched.mrg.contains_key(*n)).map(|(n, _)| n.to_string()).collect();
    if !missing.is_empty() {
        return Err(Error::Archive {
            archive: origin,
            reason: format!(
                "has no {} ({} of the sample's {} files missing): it is incomplete, or not NLTK's Penn Treebank \
                 sample; fetch it again or use another source",
                name_list(&missing),
                missing.len(),
                PTB_SAMPLE_FILES.len()
            ),
        });
    }
    for (name, sha) in PTB_SAMPLE_FILES {
        let found = sha256_hex(&fetched.mrg[name]);
        if found != sha {
            return Err(Error::Checksum { file: format!("{name} (from {origin})"), expected: sha.into(), found });
        }
    }
    events.log(&format!("{} files, checksums ok", PTB_SAMPLE_FILES.len()));
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    let mut unverified = Vec::new();
    for (name, bytes) in &fetched.mrg {
        write_atomically(&dir.join(name), bytes)?;
        if !PTB_SAMPLE_FILES.iter().any(|(n, _)| n == name) {
            unverified.push(name.clone());
        }
    }
    if !unverified.is_empty() {
        events.log(&format!(
            "{} kept unverified: no checksum is recorded for {} (the configs do not read them)",
            name_list(&unverified),
            if unverified.len() == 1 { "it" } else { "them" }
        ));
    }
    let readme = match &fetched.readme {
        Some(bytes) => bytes.clone(),
        None => {
            events.log(&format!("{origin} has no README: its terms are written to README instead"));
            format!("{PTB_SAMPLE_TERMS}\n").into_bytes()
        }
    };
    write_atomically(&dir.join("README"), &readme)?;
    Ok(PtbSample { dir: dir.to_path_buf(), verified: PTB_SAMPLE_FILES.len(), unverified, cached: false })
}
