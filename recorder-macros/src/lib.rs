//! `#[recorder::profile]`: makes a function's body an instrumented scope of the recorder (see
//! `recorder::scope!`), named after the function or as given.
//!
//! ```ignore
//! #[recorder::profile]
//! fn parse(input: &str) -> usize { input.len() }
//!
//! #[recorder::profile(name = "db::query")]
//! fn query() {}
//! ```

use proc_macro::TokenStream;
use quote::quote;
use syn::parse::{Parse, ParseStream};
use syn::{parse_macro_input, ItemFn, LitStr, Token};

/// The attribute's arguments: nothing, or `name = "..."`.
struct Args {
    name: Option<LitStr>,
}

impl Parse for Args {
    fn parse(input: ParseStream<'_>) -> syn::Result<Args> {
        if input.is_empty() {
            return Ok(Args { name: None });
        }
        let key: syn::Ident = input.parse()?;
        if key != "name" {
            return Err(syn::Error::new(key.span(), "expected `name = \"...\"`"));
        }
        input.parse::<Token![=]>()?;
        let name: LitStr = input.parse()?;
        if !input.is_empty() {
            return Err(input.error("unexpected tokens after the name"));
        }
        Ok(Args { name: Some(name) })
    }
}

/// Records every call of the function as a scope: its calls, total and self time go into the
/// running recording's scope tree (nothing happens when no recording runs).
///
/// Not for `async fn`: a scope belongs to the thread that opened it, and a future may move
/// between threads at each `.await` (use a `tracing` span with `RecorderLayer` instead).
#[proc_macro_attribute]
pub fn profile(attr: TokenStream, item: TokenStream) -> TokenStream {
    let args = parse_macro_input!(attr as Args);
    let mut function = parse_macro_input!(item as ItemFn);
    if let Some(asyncness) = function.sig.asyncness {
        return syn::Error::new(
            asyncness.span,
            "#[recorder::profile] cannot time an async fn (its future may move between threads); \
             use a tracing span with recorder::tracing::RecorderLayer",
        )
        .to_compile_error()
        .into();
    }
    let name = args.name.unwrap_or_else(|| LitStr::new(&function.sig.ident.to_string(), function.sig.ident.span()));
    let body = &function.block;
    *function.block = syn::parse_quote!({
        let _recorder_profile_guard = {
            static SITE: ::recorder::scope::Site = ::recorder::scope::Site::new(#name);
            ::recorder::scope::enter(&SITE)
        };
        #body
    });
    quote!(#function).into()
}
