import { parseId } from './id.js';
import type { CallOptions } from './id-source.js';
import { formatBase32Id, formatPaddedId, parseBase32Id, parsePaddedId, spreadId, unspreadId } from './forms.js';
import { type KeyedForm, createKeyedForm } from './keyed-form.js';
import { DEFAULT_LAYOUT, type Layout } from './layout.js';

/**
 * The forms an ID is handed out in besides the plain `bigint` (docs/design.md §1 "Forms"):
 * - `base32`: 13 characters of Crockford base32, sorts as text in numeric order ({@link formatBase32Id});
 * - `decimal`: 19 zero-padded digits, sorts as text in numeric order ({@link formatPaddedId});
 * - `spread`: a bigint with the fast-changing bits first, for range-sharded stores ({@link spreadId});
 * - `keyed`: a bigint under a deployment key, hides time and sequence ({@link KeyedForm}).
 */
export type IdForm = 'base32' | 'decimal' | 'spread' | 'keyed';

/** Every {@link IdForm}, in the order the documentation lists them. */
export const ID_FORMS: readonly IdForm[] = Object.freeze(['base32', 'decimal', 'spread', 'keyed']);

/** What an ID looks like in a form: a string for the text forms, a bigint for the integer ones. */
export type IdInForm<F extends IdForm> = F extends 'base32' | 'decimal' ? string : bigint;

/** True when `value` names an {@link IdForm}. */
export function isIdForm(value: unknown): value is IdForm {
  return typeof value === 'string' && (ID_FORMS as readonly string[]).includes(value);
}

/**
 * Options of one call to an ID source that hands the ID out in a form (`nextId({ form: 'base32' })` in
 * `@idgen/client` and `@idgen/embedded`): the ID comes as {@link IdInForm}, a string or a bigint.
 */
export interface FormCallOptions<F extends IdForm = IdForm> extends CallOptions {
  /** The form to hand the ID out in. */
  readonly form: F;
}

/** Options of {@link createIdForms}. */
export interface IdFormsOptions {
  /** The deployment's layout, which fixes the spread form's bit order (default `DEFAULT_LAYOUT`). */
  readonly layout?: Layout;
  /** The keyed form's key (16–64 bytes, or hex text); without it the `keyed` form is refused. */
  readonly key?: Uint8Array | string;
}

/**
 * One deployment's forms: formats an ID in any {@link IdForm} and reads it back, with the layout and key given once.
 * What `@idgen/client`, `@idgen/embedded` and `idgen format` use.
 */
export class IdForms {
  private readonly layout: Layout;
  private readonly keyed: KeyedForm | undefined;

  /** @internal use {@link createIdForms} */
  constructor(options: IdFormsOptions = {}) {
    this.layout = options.layout ?? DEFAULT_LAYOUT;
    this.keyed = options.key === undefined ? undefined : createKeyedForm(options.key);
  }

  /** True when the `keyed` form can be used (a key was given). */
  get hasKey(): boolean {
    return this.keyed !== undefined;
  }

  /**
   * `form` when this deployment can hand IDs out in it; throws `TypeError` for an unknown form (naming the four) or
   * for `keyed` without a key. An ID source calls it before it takes an ID, so a wrong form wastes none.
   */
  check(form: unknown): IdForm {
    if (!isIdForm(form)) throw unknownForm(form);
    if (form === 'keyed') this.keyedForm();
    return form;
  }

  /**
   * One ID from `mint`, in the form a call's options ask for (`{ form }`), or the plain bigint when they name none:
   * the one dispatch of `@idgen/client`'s and `@idgen/embedded`'s `nextId`. The form is checked before `mint` runs,
   * so an unknown form, or `keyed` without a key, rejects without taking an ID.
   */
  nextInForm(options: object | undefined, mint: () => Promise<bigint>): Promise<bigint | string> {
    return this.inForm(options, mint, (id, form) => this.format(id, form));
  }

  /** {@link IdForms.nextInForm} for a call's many IDs (`nextIds`): each in the form asked for, none taken for a wrong one. */
  manyInForm(options: object | undefined, mint: () => Promise<bigint[]>): Promise<(bigint | string)[]> {
    return this.inForm(options, mint, (ids, form) => ids.map((id) => this.format(id, form)));
  }

  /**
   * The dispatch both share: what `mint` gives as it is when the options name no form; else the form checked first
   * (a rejection, nothing minted, when it is wrong), then what `mint` gives in that form.
   */
  private inForm<T, F>(
    options: object | undefined,
    mint: () => Promise<T>,
    inForm: (minted: T, form: IdForm) => F,
  ): Promise<T | F> {
    const form = formOf(options);
    if (form === undefined) return mint();
    try {
      this.check(form);
    } catch (e) {
      return Promise.reject(e as Error);
    }
    return mint().then((minted) => inForm(minted, form));
  }

  private keyedForm(): KeyedForm {
    if (this.keyed === undefined) {
      throw new TypeError(
        "the 'keyed' form needs the deployment's key (the source's keyedFormKey), and none was given",
      );
    }
    return this.keyed;
  }

  /**
   * `id` in `form`. Throws `TypeError` for an unknown form (naming the four) or `keyed` without a key, and
   * `RangeError` for an ID outside 0 … 2^63 − 1.
   */
  format<F extends IdForm>(id: bigint, form: F): IdInForm<F>;
  format(id: bigint, form: IdForm): string | bigint {
    switch (form) {
      case 'base32':
        return formatBase32Id(id);
      case 'decimal':
        return formatPaddedId(id);
      case 'spread':
        return spreadId(id, this.layout);
      case 'keyed':
        return this.keyedForm().hide(id);
      default:
        throw unknownForm(form);
    }
  }

  /**
   * The ID that `value` is in `form`. The integer forms take a bigint or their canonical decimal text (read with
   * `parseId`). Throws `InvalidIdError` for a value that is not one (naming why), `TypeError` for an unknown form
   * or `keyed` without a key.
   */
  parse(value: string | bigint, form: IdForm): bigint {
    switch (form) {
      case 'base32':
        return parseBase32Id(value as string);
      case 'decimal':
        return parsePaddedId(value as string);
      case 'spread':
        return unspreadId(typeof value === 'string' ? parseId(value) : value, this.layout);
      case 'keyed': {
        const keyed = this.keyedForm();
        return keyed.reveal(typeof value === 'string' ? parseId(value) : value);
      }
      default:
        throw unknownForm(form);
    }
  }
}

function unknownForm(form: unknown): TypeError {
  return new TypeError(`unknown ID form ${JSON.stringify(String(form))}: the forms are ${ID_FORMS.join(', ')}`);
}

/** The forms of one deployment (its layout and, for `keyed`, its key). Throws as `createKeyedForm` does. */
export function createIdForms(options: IdFormsOptions = {}): IdForms {
  return new IdForms(options);
}

/** The form a call's options name (`FormCallOptions.form`), unchecked; undefined when they name none. */
function formOf(options: object | undefined): IdForm | undefined {
  return (options as Partial<FormCallOptions> | undefined)?.form;
}
