//! Prompts with images, as llama.cpp's mtmd evaluates them: a prompt is a list of chunks, text
//! tokens and image inputs; an image is one input (LLaVA, Gemma 3) or several (SmolVLM's tiles
//! and overview, with text between them, as the projector's [`ImageLayout`] says); an input is
//! the projector's embedding rows, fed through [`PlacedModel::try_forward_embeddings`] in
//! batches of at most `n_batch` rows (with attention among one batch's rows both ways where
//! the layout says so: Gemma 3), and it takes as many positions as it has rows (one per image
//! token, as mtmd counts them for models without M-RoPE). Every front end (the CLI, `--chat`,
//! the server's slots) goes through [`Media`].
//!
//! In a session's token list an input's positions hold one *media token* each: an id with the
//! top bit set (no vocabulary has 2³¹ entries) made from the hash of the image's bytes and the
//! input's index, so a cached prefix matches an image only when the same bytes sit at the same
//! place, and a context shift can tell where an input begins and ends (it never cuts one in
//! half). The encoded images are cached by that hash too, so an image sent again is encoded
//! once.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use super::session::Session;
use super::PlacedModel;
use crate::backend::BackendError;
use crate::bundle::{resolve_model, Bundle};
use crate::gguf::GgufFile;
use crate::model::Batch;
use crate::tokenizer::Tokenizer;
use crate::vision::{self, ImageLayout, Projector, TileLayout, VisionError};

/// Where an image goes in prompt text (llama.cpp's `mtmd_default_marker()`).
pub const MEDIA_MARKER: &str = "<__media__>";

/// The bit that marks a media token.
const MEDIA_BIT: u32 = 1 << 31;

/// Encoded images kept for reuse.
const CACHED_IMAGES: usize = 16;

/// The media token of an image whose bytes hash to `hash`.
pub fn media_token(hash: u64) -> u32 {
    MEDIA_BIT | ((hash ^ (hash >> 32)) as u32 & !MEDIA_BIT)
}

/// Whether `t` stands for a position of an image rather than a vocabulary token.
pub fn is_media_token(t: u32) -> bool {
    t & MEDIA_BIT != 0
}

/// FNV-1a, 64 bits, of `bytes` (llama-server names images by the same hash).
pub fn image_hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// `n` moved forward past the rest of an image it falls inside of `tokens` (an index between
/// two positions of one image becomes the index after its last).
pub fn after_image(tokens: &[u32], mut n: usize) -> usize {
    while n > 0 && n < tokens.len() && is_media_token(tokens[n]) && tokens[n] == tokens[n - 1] {
        n += 1;
    }
    n
}

/// `n` moved forward to the end of the whole image (one of `spans`, sorted) it falls strictly
/// inside of, or to the end of `tokens` for an image not all there yet.
pub fn after_span(spans: &[Range<usize>], n: usize, len: usize) -> usize {
    match spans.iter().find(|s| s.start < n && n < s.end) {
        Some(s) => s.end.min(len).max(n),
        None => n,
    }
}

/// Where a context shift of `tokens` cuts when it keeps the first `keep`: the positions it
/// keeps and how many after them it drops (the older half of the rest), both moved forward so
/// that no image input (its run of media tokens) and no whole image of `spans` (its markers,
/// tiles and overview) is cut in half: an image is kept with the prefix or dropped whole.
pub fn shift_cut(tokens: &[u32], spans: &[Range<usize>], keep: usize) -> (usize, usize) {
    let len = tokens.len();
    let cut = |n: usize| after_span(spans, after_image(tokens, n.min(len)), len);
    let keep = cut(keep);
    let discard = (len - keep) / 2;
    (keep, cut(keep + discard) - keep)
}

/// `spans` after a context shift dropped positions `keep..keep + discard` (cut as
/// [`shift_cut`] cuts): the images there are gone and the later ones move down.
pub fn shift_spans(spans: &mut Vec<Range<usize>>, keep: usize, discard: usize) {
    spans.retain(|s| s.end <= keep || s.start >= keep + discard);
    for s in spans.iter_mut().filter(|s| s.start >= keep + discard) {
        *s = s.start - discard..s.end - discard;
    }
}

/// `n` moved back to the start of an image it falls inside of `tokens`.
pub fn before_image(tokens: &[u32], mut n: usize) -> usize {
    while n > 0 && n < tokens.len() && is_media_token(tokens[n]) && tokens[n] == tokens[n - 1] {
        n -= 1;
    }
    n
}

/// Why a prompt with images could not be built or evaluated.
#[derive(Debug, thiserror::Error)]
pub enum MediaError {
    #[error(transparent)]
    Vision(#[from] VisionError),
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error("cannot open the projector {name}: {message}")]
    Open { name: String, message: String },
    #[error(
        "the projector gives rows of {projector} values but the model's embeddings have {model}: \
         the projector is not for this model"
    )]
    WidthMismatch { projector: usize, model: usize },
    #[error("the prompt has {markers} media markers ({MEDIA_MARKER}) but {images} images")]
    MarkerCount { markers: usize, images: usize },
    #[error(
        "this projector's images are read with bidirectional attention over their rows, which \
         the {0} backend does not implement: run the model's blocks on the CPU (-ngl 0)"
    )]
    NonCausalBackend(String),
    #[error(
        "this model rotates an image's rows by their 2-D positions (M-RoPE), which the {0} \
         backend does not implement: run the model's blocks on the CPU (-ngl 0)"
    )]
    MropeBackend(String),
    #[error(
        "projector type '{projector}' places its image rows at 2-D positions (M-RoPE), which \
         the model's architecture '{arch}' does not read: the projector is not for this model"
    )]
    NotMrope {
        projector: &'static str,
        arch: &'static str,
    },
    #[error(
        "projector type '{projector}' places the token {text:?} around its images, and the \
         model's vocabulary has no such token"
    )]
    MissingToken {
        projector: &'static str,
        text: &'static str,
    },
}

/// One input the projector encoded: a whole image, or a tile or the overview of an image cut
/// into tiles.
#[derive(Debug)]
pub struct ImageInput {
    /// The image's hash, mixed with the input's index when the image has several.
    pub hash: u64,
    /// `n_tokens` rows of the text model's width.
    pub rows: Vec<f32>,
    pub n_tokens: usize,
    /// The text model reads the rows with attention both ways within a batch (Gemma 3).
    pub bidirectional: bool,
    /// The rows' grid (columns, rows) for a model with M-RoPE (Qwen2-VL): row `i` takes the
    /// 2-D position of column `i mod columns`, row `i / columns`, and the image advances the
    /// position by the longer side. `None`: one position per row, in order.
    pub grid: Option<(usize, usize)>,
}

impl ImageInput {
    /// The media token its positions hold.
    pub fn token(&self) -> u32 {
        media_token(self.hash)
    }
}

/// One encoded image: its inputs in the order the prompt holds them.
#[derive(Debug)]
pub struct Image {
    /// FNV-1a of the file's bytes.
    pub hash: u64,
    /// One input, or, with `grid`, the tiles row by row and then the overview.
    pub inputs: Vec<Arc<ImageInput>>,
    /// The tiles' columns and rows, for an image cut into tiles.
    pub grid: Option<(usize, usize)>,
}

impl Image {
    /// Positions its inputs take (not counting the text between them).
    pub fn n_tokens(&self) -> usize {
        self.inputs.iter().map(|i| i.n_tokens).sum()
    }
}

/// A piece of a prompt.
#[derive(Clone, Debug)]
pub enum Chunk {
    Text(Vec<u32>),
    Image(Arc<ImageInput>),
}

/// A prompt of text and images.
#[derive(Clone, Debug, Default)]
pub struct MediaPrompt {
    pub chunks: Vec<Chunk>,
    /// The positions each whole image takes, in order: its begin and end text, and for an
    /// image cut into tiles every tile, the overview and the text between them. A context
    /// shift keeps or drops each of these whole.
    pub spans: Vec<Range<usize>>,
}

impl MediaPrompt {
    /// A prompt of text only.
    pub fn text(tokens: Vec<u32>) -> MediaPrompt {
        MediaPrompt {
            chunks: vec![Chunk::Text(tokens)],
            spans: Vec::new(),
        }
    }

    /// Positions it takes.
    pub fn len(&self) -> usize {
        self.chunks
            .iter()
            .map(|c| match c {
                Chunk::Text(t) => t.len(),
                Chunk::Image(i) => i.n_tokens,
            })
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Positions taken by images' rows.
    pub fn n_image_tokens(&self) -> usize {
        self.images().map(|i| i.n_tokens).sum()
    }

    /// The image inputs, in order.
    pub fn images(&self) -> impl Iterator<Item = &Arc<ImageInput>> {
        self.chunks.iter().filter_map(|c| match c {
            Chunk::Image(i) => Some(i),
            Chunk::Text(_) => None,
        })
    }

    /// One id per position: text tokens, and each image's media token.
    pub fn tokens(&self) -> Vec<u32> {
        let mut out = Vec::with_capacity(self.len());
        for c in &self.chunks {
            match c {
                Chunk::Text(t) => out.extend_from_slice(t),
                Chunk::Image(i) => out.extend(std::iter::repeat_n(i.token(), i.n_tokens)),
            }
        }
        out
    }

    /// Where the first image input starting after position `pos` starts.
    pub fn next_image_after(&self, pos: usize) -> Option<usize> {
        let mut off = 0;
        for c in &self.chunks {
            match c {
                Chunk::Text(t) => off += t.len(),
                Chunk::Image(_) if off > pos => return Some(off),
                Chunk::Image(i) => off += i.n_tokens,
            }
        }
        None
    }

    /// The image input that starts at position `pos`, if one does.
    pub fn image_at(&self, pos: usize) -> Option<&Arc<ImageInput>> {
        let mut off = 0;
        for c in &self.chunks {
            match c {
                Chunk::Text(t) => off += t.len(),
                Chunk::Image(i) if off == pos => return Some(i),
                Chunk::Image(i) => off += i.n_tokens,
            }
            if off > pos {
                return None;
            }
        }
        None
    }
}

/// A loaded projector, the layout of its images in a prompt, and the images encoded so far.
pub struct Media {
    pub projector: Projector,
    pub layout: ImageLayout,
    /// Most recently used last.
    cache: Mutex<VecDeque<Arc<Image>>>,
}

impl Media {
    /// Opens the projector `name`, resolved as `-m` resolves a model (a file, `/zip/NAME` or an
    /// entry of our own ZIP `own`).
    pub fn load(name: &str, own: Option<&Bundle>) -> Result<Media, MediaError> {
        let open = |message: String| MediaError::Open {
            name: name.to_string(),
            message,
        };
        let loc = resolve_model(name, own).map_err(|e| open(e.to_string()))?;
        let file = GgufFile::open_range(&loc.path, loc.offset, loc.len)
            .map_err(|e| open(e.to_string()))?;
        let projector = Projector::load(Arc::new(file))?;
        Ok(Media::new(projector))
    }

    /// A projector ready to encode images.
    pub fn new(projector: Projector) -> Media {
        Media {
            layout: projector.layout(),
            projector,
            cache: Mutex::new(VecDeque::new()),
        }
    }

    /// Checks that the projector's rows are `model`'s embedding width, and that the backends
    /// running its blocks read the rows as the layout says (only the CPU backend attends both
    /// ways within a batch).
    pub fn check_model(&self, model: &PlacedModel) -> Result<(), MediaError> {
        let (projector, width) = (self.projector.n_embd_out(), model.config.n_embd);
        if projector != width {
            return Err(MediaError::WidthMismatch {
                projector,
                model: width,
            });
        }
        let stages = model.placement().stages();
        if let Some(b) = stages
            .iter()
            .find(|b| !self.layout.causal && !b.reads_bidirectional())
        {
            return Err(MediaError::NonCausalBackend(b.name().to_string()));
        }
        if self.projector.ty.mrope() && model.config.rope_sections.is_none() {
            return Err(MediaError::NotMrope {
                projector: self.projector.ty.name(),
                arch: model.config.arch.name(),
            });
        }
        if let Some(b) = stages
            .iter()
            .find(|b| model.config.rope_sections.is_some() && !b.reads_mrope())
        {
            return Err(MediaError::MropeBackend(b.name().to_string()));
        }
        Ok(())
    }

    /// The image file `bytes` decoded, prepared and encoded, or the cached encoding of the same
    /// bytes.
    pub fn image(&self, bytes: &[u8]) -> Result<Arc<Image>, MediaError> {
        let hash = image_hash(bytes);
        if let Some(hit) = self.cached(hash) {
            return Ok(hit);
        }
        let rgb = vision::decode(bytes)?;
        let p = &self.projector;
        let tiles = vision::preprocess_tiles(&rgb, p.ty, &p.hparams);
        let several = tiles.images.len() > 1;
        let inputs = tiles
            .images
            .iter()
            .enumerate()
            .map(|(i, input)| {
                let rows = p.encode(input);
                Arc::new(ImageInput {
                    hash: if several {
                        image_hash(&[hash.to_le_bytes(), (i as u64).to_le_bytes()].concat())
                    } else {
                        hash
                    },
                    n_tokens: rows.len() / p.n_embd_out(),
                    grid: p.token_grid(input),
                    rows,
                    bidirectional: !self.layout.causal,
                })
            })
            .collect();
        let image = Arc::new(Image {
            hash,
            inputs,
            grid: tiles.grid,
        });
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() == CACHED_IMAGES {
            cache.pop_front();
        }
        cache.push_back(image.clone());
        Ok(image)
    }

    fn cached(&self, hash: u64) -> Option<Arc<Image>> {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        let i = cache.iter().position(|c| c.hash == hash)?;
        let hit = cache.remove(i)?;
        cache.push_back(hit.clone());
        Some(hit)
    }

    /// `text` with each [`MEDIA_MARKER`] replaced by the next of `images` (with the layout's
    /// begin and end text around it, or its tiles and overview with the text around each), as
    /// mtmd tokenizes it: each piece of text on its own with special tokens parsed, and, with
    /// `add_special`, the vocabulary's BOS before the first (and its EOS after the last, for a
    /// vocabulary that adds one).
    pub fn tokenize(
        &self,
        tok: &Tokenizer,
        text: &str,
        images: &[Arc<Image>],
        add_special: bool,
    ) -> Result<MediaPrompt, MediaError> {
        let pieces: Vec<&str> = text.split(MEDIA_MARKER).collect();
        if pieces.len() - 1 != images.len() {
            return Err(MediaError::MarkerCount {
                markers: pieces.len() - 1,
                images: images.len(),
            });
        }
        let mut p = MediaPrompt::default();
        for (i, piece) in pieces.iter().enumerate() {
            push_ids(&mut p.chunks, tok.encode(piece, false, true));
            if let Some(img) = images.get(i) {
                let start = p.len();
                let chunks = &mut p.chunks;
                push_ids(chunks, tok.encode(self.layout.begin, false, true));
                match &self.layout.tiles {
                    Some(t) => self.push_tiles(chunks, tok, t, img, img.grid.unwrap_or((0, 0)))?,
                    None => chunks.extend(img.inputs.iter().map(|i| Chunk::Image(i.clone()))),
                }
                push_ids(chunks, tok.encode(self.layout.end, false, true));
                p.spans.push(start..p.len());
            }
        }
        let mut chunks = p.chunks;
        let mut spans = p.spans;
        if add_special && tok.add_bos() {
            if let Some(bos) = tok.bos() {
                match chunks.first_mut() {
                    Some(Chunk::Text(t)) => t.insert(0, bos),
                    _ => chunks.insert(0, Chunk::Text(vec![bos])),
                }
                for s in &mut spans {
                    *s = s.start + 1..s.end + 1;
                }
            }
        }
        if add_special && tok.add_eos() {
            if let Some(eos) = tok.eos() {
                match chunks.last_mut() {
                    Some(Chunk::Text(t)) => t.push(eos),
                    _ => chunks.push(Chunk::Text(vec![eos])),
                }
            }
        }
        Ok(MediaPrompt { chunks, spans })
    }

    /// The tiles of `img` (a `grid` of columns and rows, none for an image that is its
    /// overview alone) and its overview, with the text and tokens `t` places around them.
    fn push_tiles(
        &self,
        chunks: &mut Vec<Chunk>,
        tok: &Tokenizer,
        t: &TileLayout,
        img: &Image,
        (cols, rows): (usize, usize),
    ) -> Result<(), MediaError> {
        let lookup = |texts: &[&'static str]| -> Result<Vec<u32>, MediaError> {
            texts
                .iter()
                .map(|&text| {
                    lookup_token(tok, text).ok_or(MediaError::MissingToken {
                        projector: self.projector.ty.name(),
                        text,
                    })
                })
                .collect()
        };
        let (row_end, ov_begin, ov_end) = (
            lookup(t.row_end)?,
            lookup(t.overview_begin)?,
            lookup(t.overview_end)?,
        );
        let (open, close) = (lookup(t.tile_open)?, lookup(t.tile_close)?);
        let (all_begin, all_end) = (lookup(t.tiles_begin)?, lookup(t.tiles_end)?);
        let n_tiles = cols * rows;
        let (tiles, overview) = match t.overview_first {
            true => {
                let (ov, tiles) = img.inputs.split_at(img.inputs.len() - n_tiles);
                (tiles, ov)
            }
            false => img.inputs.split_at(n_tiles),
        };
        let push_overview = |chunks: &mut Vec<Chunk>| {
            for ov in overview {
                push_ids(chunks, ov_begin.clone());
                chunks.push(Chunk::Image(ov.clone()));
                push_ids(chunks, ov_end.clone());
            }
        };
        if t.overview_first {
            push_overview(chunks);
        }
        if !tiles.is_empty() {
            push_ids(chunks, all_begin);
        }
        for (k, tile) in tiles.iter().enumerate() {
            let (y, x) = (k / cols, k % cols);
            push_ids(chunks, tok.encode(&t.tile_text(y, x), false, true));
            push_ids(chunks, open.clone());
            chunks.push(Chunk::Image(tile.clone()));
            push_ids(chunks, close.clone());
            if x + 1 == cols && y + 1 < rows {
                push_ids(chunks, row_end.clone());
            }
        }
        if !tiles.is_empty() {
            push_ids(chunks, all_end);
        }
        if !t.overview_first {
            push_overview(chunks);
        }
        Ok(())
    }
}

/// `ids` appended to the prompt's last text chunk, or as a new one after an image.
fn push_ids(chunks: &mut Vec<Chunk>, ids: Vec<u32>) {
    if ids.is_empty() {
        return;
    }
    match chunks.last_mut() {
        Some(Chunk::Text(t)) => t.extend(ids),
        _ => chunks.push(Chunk::Text(ids)),
    }
}

/// The first token whose piece (special tokens rendered) is `text`, as mtmd looks up the
/// tokens of its slice templates.
fn lookup_token(tok: &Tokenizer, text: &str) -> Option<u32> {
    (0..tok.n_vocab() as u32).find(|&id| tok.token_to_piece(id, true) == text.as_bytes())
}

impl Session<'_> {
    /// Feeds `prompt` into the session, reusing the part it already holds: the session keeps
    /// its longest common prefix with the prompt (but at most `at_most` positions, and never
    /// part of an image), and the rest is evaluated: text in batches of `n_batch` tokens, images
    /// in batches of `n_batch` rows. Returns the logits after the prompt's last position and
    /// how many positions were reused.
    pub fn feed_prompt(
        &mut self,
        prompt: &MediaPrompt,
        at_most: usize,
    ) -> Result<(Vec<f32>, usize), MediaError> {
        let tokens = prompt.tokens();
        let keep = super::session::common_prefix(&self.tokens, &tokens).min(at_most);
        let keep = before_image(&tokens, keep);
        self.truncate(keep);
        self.image_spans = prompt.spans.clone();
        let mut logits = Vec::new();
        let mut off = 0;
        for c in &prompt.chunks {
            match c {
                Chunk::Text(t) => {
                    let end = off + t.len();
                    if end > keep {
                        logits = self.feed(&t[keep.max(off) - off..], false)?;
                    }
                    off = end;
                }
                Chunk::Image(img) => {
                    if off >= keep {
                        logits = self.feed_image(img)?;
                    }
                    off += img.n_tokens;
                }
            }
        }
        Ok((logits, keep))
    }

    /// Feeds one image input's rows after the session's tokens (each batch read both ways where
    /// the input says so); returns the logits after its last.
    pub fn feed_image(&mut self, img: &ImageInput) -> Result<Vec<f32>, BackendError> {
        let n_embd = self.model.config.n_embd;
        let token = img.token();
        let mut logits = Vec::new();
        // M-RoPE (mtmd's positions): row i of a grid of `nx` columns at (p0, p0 + i / nx,
        // p0 + i mod nx, 0); the image takes the longer side's count of positions.
        let mrope = self.model.config.rope_sections.is_some();
        let p0 = self.rope_pos(self.tokens.len());
        let start = self.tokens.len();
        let rope_pos = |i: usize| -> [i64; 4] {
            match img.grid {
                Some((nx, _)) => {
                    let (y, x) = ((i / nx) as i64, (i % nx) as i64);
                    [p0, p0 + y, p0 + x, 0]
                }
                None => [p0 + i as i64; 4],
            }
        };
        for rows in img.rows.chunks(self.n_batch * n_embd) {
            let n = rows.len() / n_embd;
            let mut batch = Batch::sequence(&vec![token; n], self.tokens.len(), false);
            batch.bidirectional = img.bidirectional;
            if mrope {
                let first = self.tokens.len() - start;
                batch.rope_pos = (first..first + n).map(rope_pos).collect();
            }
            let lora = self.lora.as_ref().unwrap_or(self.model.lora_mix());
            logits = self.model.try_forward_embeddings_mix(
                &batch,
                rows,
                std::slice::from_mut(&mut self.cache),
                lora,
            )?;
            self.tokens.extend(std::iter::repeat_n(token, n));
        }
        if let (true, Some((nx, ny))) = (mrope, img.grid) {
            let gap = img.n_tokens - nx.max(ny).min(img.n_tokens);
            self.rope_gaps.push((self.tokens.len(), gap));
        }
        Ok(logits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_tokens_are_out_of_any_vocabulary() {
        let t = media_token(image_hash(b"abc"));
        assert!(is_media_token(t));
        assert!(!is_media_token(151_000));
        assert_ne!(
            media_token(image_hash(b"abc")),
            media_token(image_hash(b"abd"))
        );
    }

    #[test]
    fn image_bounds_are_found_from_either_side() {
        let m = media_token(7);
        let n = media_token(8);
        // text, image m (3), image n (2), text
        let t = [1, 2, m, m, m, n, n, 5];
        assert_eq!(after_image(&t, 3), 5);
        assert_eq!(after_image(&t, 4), 5);
        assert_eq!(after_image(&t, 2), 2);
        assert_eq!(after_image(&t, 5), 5);
        assert_eq!(after_image(&t, 6), 7);
        assert_eq!(before_image(&t, 4), 2);
        assert_eq!(before_image(&t, 6), 5);
        assert_eq!(before_image(&t, 7), 7);
        assert_eq!(before_image(&t, 8), 8);
    }

    /// SmolVLM's layout: text, then a begin marker, two tiles with their markers, the
    /// overview between its own, an end marker, then text and a Gemma-3-like single image.
    fn tiled_tokens() -> (Vec<u32>, Vec<Range<usize>>) {
        let (a, b, o, g) = (
            media_token(1),
            media_token(2),
            media_token(3),
            media_token(4),
        );
        let mut t = vec![1, 2, 3];
        let first = t.len();
        t.extend([10, 11]);
        t.extend([a; 4]);
        t.extend([12]);
        t.extend([b; 4]);
        t.extend([13, 14]);
        t.extend([o; 4]);
        t.extend([15]);
        let second = t.len();
        t.extend([20, 21, 22, 23]);
        let third = t.len();
        t.extend([16, g, g, g, 17]);
        let spans = vec![first..second, third..t.len()];
        t.extend(30..34);
        (t, spans)
    }

    #[test]
    fn a_shift_keeps_or_drops_whole_tiled_images() {
        let (t, spans) = tiled_tokens();
        let inside = |n: usize| spans.iter().any(|s| s.start < n && n < s.end);
        for keep in 0..=t.len() {
            let (k, d) = shift_cut(&t, &spans, keep);
            assert!(k >= keep.min(t.len()), "keep {keep}");
            assert!(
                !inside(k) && !inside(k + d),
                "keep {keep}: cut at {k} and {}",
                k + d
            );
            assert!(after_image(&t, k) == k && after_image(&t, k + d) == k + d);
        }
        // Between the two tiles: the whole image is kept.
        assert_eq!(shift_cut(&t, &spans, 10).0, spans[0].end);
        // The older half of the rest ends between the tiles: the whole image goes.
        let (k, d) = shift_cut(&t, &spans, 2);
        assert_eq!((k, k + d), (2, spans[0].end));
        // Without the spans only the inputs stay whole (a cut between tiles).
        assert_eq!(shift_cut(&t, &[], 10), (10, (t.len() - 10) / 2));
    }

    #[test]
    fn spans_follow_a_shift() {
        let (_, spans) = tiled_tokens();
        let mut s = spans.clone();
        shift_spans(&mut s, 2, spans[0].end - 2);
        let d = spans[0].end - 2;
        assert_eq!(s, vec![spans[1].start - d..spans[1].end - d]);
        let mut s = spans.clone();
        shift_spans(&mut s, spans[0].end, 4);
        assert_eq!(
            s,
            vec![spans[0].clone(), spans[1].start - 4..spans[1].end - 4]
        );
        let mut s = spans.clone();
        shift_spans(&mut s, spans[1].end, 5);
        assert_eq!(s, spans);
    }

    #[test]
    fn prompt_positions_follow_chunks() {
        let img = Arc::new(ImageInput {
            hash: 3,
            rows: vec![0.0; 8],
            n_tokens: 4,
            bidirectional: false,
            grid: None,
        });
        let p = MediaPrompt {
            chunks: vec![
                Chunk::Text(vec![1, 2]),
                Chunk::Image(img.clone()),
                Chunk::Text(vec![3]),
            ],
            spans: std::iter::once(2..6).collect(),
        };
        assert_eq!(p.len(), 7);
        assert_eq!(p.n_image_tokens(), 4);
        let t = p.tokens();
        assert_eq!(t[..2], [1, 2]);
        assert!(t[2..6].iter().all(|&x| x == img.token()));
        assert_eq!(t[6], 3);
        assert!(p.image_at(2).is_some());
        assert!(p.image_at(3).is_none());
        assert!(p.image_at(0).is_none());
        assert_eq!(p.next_image_after(0), Some(2));
        assert_eq!(p.next_image_after(2), None);
    }
}
