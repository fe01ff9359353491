export const PLACEHOLDER = true;
