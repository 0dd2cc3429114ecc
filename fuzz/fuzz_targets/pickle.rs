//! The `data.pkl` of a `torch.save` archive (the Marian importer's `pytorch_model.bin`): any bytes
//! give the state dict's tensor views or an error, in bounded memory and stack, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = transformer::import::pickle::tensor_views(data);
});
